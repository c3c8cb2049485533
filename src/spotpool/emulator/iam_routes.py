"""Admin routes of the emulator's identities: /_emulator/iam (GET: who is there; POST: add key
pairs of other accounts, roles with their trust policies — a role of the same ARN is replaced,
which is how a test revokes a trust policy — OIDC providers, the temporary keys' longest life);
/_emulator/iam/issued: the temporary keys handed out, secrets included, for leak searches.
"""

import json
import logging

from aiohttp import web
from pydantic import ValidationError

from spotpool.emulator.iam import IamSettings
from spotpool.emulator.world import World

log = logging.getLogger("spotpool.emulator")


def add_iam_routes(app: web.Application, world: World) -> None:
    async def describe(request: web.Request) -> web.Response:
        return web.json_response(world.iam.describe())

    async def configure(request: web.Request) -> web.Response:
        try:
            asked = IamSettings.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return web.json_response(
                {"Error": f"expected {{Keys, Roles, OidcProviders, MaxLifetimeSeconds}}: {error}"},
                status=400,
            )
        world.iam.configure(asked)
        log.info("admin=iam roles=%s", ",".join(r.arn for r in asked.roles) or "-")
        return web.json_response(world.iam.describe())

    async def issued(request: web.Request) -> web.Response:
        return web.json_response({"Issued": world.iam.issued()})

    app.router.add_get("/_emulator/iam", describe)
    app.router.add_get("/_emulator/iam/issued", issued)
    app.router.add_post("/_emulator/iam", configure)
