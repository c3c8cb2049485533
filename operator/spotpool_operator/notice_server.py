"""The operator's termination-notice endpoint: `POST /v1/notices` from the pools' agents.

It only parses and answers; the reconciler (notices.py) checks each report and acts on it.
"""

import logging

from aiohttp import web

from spotpool.api.notices import REPORT_PATH, SIGNATURE_HEADER
from spotpool_operator.notices import Notices

log = logging.getLogger("spotpool_operator.notices")
MAX_BODY = 4096  # a report is about 150 bytes


class NoticeServer:
    def __init__(self, notices: Notices, host: str, port: int) -> None:
        self.notices, self.host, self.port = notices, host, port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(REPORT_PATH, self._report)
        app.router.add_get("/healthz", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        log.info("termination notices on http://%s:%d%s", self.host, self.port, REPORT_PATH)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _report(self, request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.notices.metrics.observe_notice("malformed")
            return web.json_response({"message": "report too large"}, status=413)
        code, message = self.notices.receive_notice(body, request.headers.get(SIGNATURE_HEADER, ""))
        level = logging.INFO if code < 400 else logging.WARNING
        log.log(level, "notice from %s: %d %s", request.remote, code, message)
        return web.json_response({"message": message}, status=code)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})
