"""Admin routes for spot prices (`GET`/`POST /_emulator/prices`) and the drift loop: a price
that rises above an instance's max price reclaims it (notice, then termination), as a reclaim
by the cloud does."""

import asyncio
import json
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from pydantic import ValidationError

from spotpool.emulator.prices import SpotPrice, known, over_max_price
from spotpool.emulator.world import World

log = logging.getLogger("spotpool.emulator")


def reclaim_over_max_price(world: World) -> list[str]:
    """Reclaim every live spot instance whose max price the market now passes; their ids."""
    world.advance()
    doomed = over_max_price(world.store.instances.values(), world.prices)
    if doomed:
        world.reclaim(doomed)
        log.info("price-reclaim instances=%s", ",".join(r.instance_id for r in doomed))
    return [r.instance_id for r in doomed]


def add_price_routes(app: web.Application, world: World) -> None:
    async def list_prices(request: web.Request) -> web.Response:
        return web.json_response({"Prices": world.prices.rows()})

    async def set_price(request: web.Request) -> web.Response:
        try:
            asked = SpotPrice.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return web.json_response(
                {"Error": f"expected {{Zone, InstanceType, Price}}: {error}"}, status=400
            )
        problem = known(asked.zone, asked.instance_type)
        if problem:
            return web.json_response({"Error": problem}, status=400)
        world.prices.set(asked.zone, asked.instance_type, asked.price)
        reclaimed = reclaim_over_max_price(world)
        log.info(
            "admin=price zone=%s type=%s price=%s",
            asked.zone,
            asked.instance_type,
            world.prices.price(asked.zone, asked.instance_type),
        )
        return web.json_response({"Prices": world.prices.rows(), "Reclaimed": reclaimed})

    async def drift(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(_drift_loop(world)) if world.prices.drift > 0 else None
        yield
        if task is not None:
            task.cancel()

    app.router.add_get("/_emulator/prices", list_prices)
    app.router.add_post("/_emulator/prices", set_price)
    app.cleanup_ctx.append(drift)


async def _drift_loop(world: World) -> None:
    while True:
        await asyncio.sleep(world.prices.drift_seconds)
        world.prices.step()
        reclaim_over_max_price(world)
