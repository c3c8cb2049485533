"""Admin routes for the cloud's misbehaviour on request (`/_emulator/misbehaviour`): `GET` the
settings and counters, `POST` settings (only the fields given change), `DELETE` back to a
perfect cloud with the counters at 0."""

import json
import logging

from aiohttp import web

from spotpool.emulator.misbehaviour import Misbehaving

log = logging.getLogger("spotpool.emulator")

_EXPECTED = (
    "expected {LoseAnswers: {Actions, Rate}, ListingLagSeconds, PartialRunRate, "
    "LaunchFailedRate, ThrottleRate, ServerErrorRate, Http503Rate} (any of them)"
)


def add_misbehaviour_routes(app: web.Application, misbehaving: Misbehaving) -> None:
    async def describe(request: web.Request) -> web.Response:
        return web.json_response(misbehaving.describe())

    async def configure(request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("the body must be a JSON object")
            settings = misbehaving.settings.updated(changes)
        except ValueError as error:  # not JSON, or not settings (a ValidationError)
            return web.json_response({"Error": f"{_EXPECTED}: {error}"}, status=400)
        misbehaving.configure(settings)
        log.info("admin=misbehaviour %s", json.dumps(settings.model_dump(by_alias=True)))
        return await describe(request)

    async def clear(request: web.Request) -> web.Response:
        misbehaving.clear()
        log.info("admin=misbehaviour cleared")
        return await describe(request)

    app.router.add_get("/_emulator/misbehaviour", describe)
    app.router.add_post("/_emulator/misbehaviour", configure)
    app.router.add_delete("/_emulator/misbehaviour", clear)
