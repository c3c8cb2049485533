"""The HTTP face of the emulator: Tencent Cloud API 3.0 on `/`, admin routes on `/_emulator/`."""

import asyncio
import json
import logging
import random
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotpool.emulator import cvm, instance_ops
from spotpool.emulator.catalog import INSTANCE_TYPES, REGIONS, zones
from spotpool.emulator.errors import ApiError
from spotpool.emulator.iam import DEFAULT_ACCOUNT, Principal
from spotpool.emulator.iam_routes import add_iam_routes
from spotpool.emulator.limits import MESSAGE as LIMIT_MESSAGE
from spotpool.emulator.limits import LimitSettings, RequestLimits
from spotpool.emulator.misbehaviour import HTTP_503, HTTP_503_BODY, Misbehaviour, drop_connection
from spotpool.emulator.misbehaviour_routes import add_misbehaviour_routes
from spotpool.emulator.price_routes import add_price_routes
from spotpool.emulator.reclaim_rates import ReclaimRates
from spotpool.emulator.requestlog import Call, RequestLog
from spotpool.emulator.services import CBS_ACTIONS, TAG_ACTIONS, VPC_ACTIONS, Handler
from spotpool.emulator.signature import Caller, SignedRequest, scope_service, verify
from spotpool.emulator.sts import STS_ACTIONS, UNSIGNED_ACTIONS
from spotpool.emulator.world import Context, World

log = logging.getLogger("spotpool.emulator")


@dataclass(frozen=True)
class Service:
    version: str
    actions: dict[str, Handler]
    regional: bool = True


SERVICES: dict[str, Service] = {
    "cvm": Service("2017-03-12", {**cvm.ACTIONS, **instance_ops.ACTIONS}),
    "tag": Service("2018-08-13", TAG_ACTIONS, regional=False),
    "cbs": Service("2017-03-12", CBS_ACTIONS),
    "vpc": Service("2017-03-12", VPC_ACTIONS),
    "sts": Service("2018-08-13", STS_ACTIONS, regional=False),
}
API_HOST_SUFFIX = ".tencentcloudapi.com"
_SERVICE_NAME = re.compile(r"^[a-z0-9]+$")


class Fault(BaseModel):
    """Make a share of one action's calls fail (and/or be slow), as a real cloud sometimes does."""

    model_config = ConfigDict(populate_by_name=True)
    service: str = Field("cvm", alias="Service")
    action: str = Field("*", alias="Action")
    code: str = Field("InternalError", alias="Code")
    rate: float = Field(1.0, ge=0.0, le=1.0, alias="Rate")
    latency_ms: int = Field(0, ge=0, le=60_000, alias="LatencyMs")

    def matches(self, service: str, action: str) -> bool:
        return self.service in (service, "*") and self.action in (action, "*")


class CapacityRequest(BaseModel):
    zone: str = Field(alias="Zone")
    instance_type: str = Field(alias="InstanceType")
    available: int | None = Field(alias="Available", ge=0)


class ReclaimRequest(BaseModel):
    instance_ids: list[str] = Field(default_factory=list, alias="InstanceIds")
    count: int | None = Field(None, ge=1, alias="Count")
    zone: str | None = Field(None, alias="Zone")


_FAULT_MESSAGES = {
    "RequestLimitExceeded": "Your request frequency has exceeded the limit.",
    "InternalError": "An internal error has occurred. Retry your request.",
}


def _api_reply(body: dict[str, Any]) -> web.Response:
    # Exactly `application/json`, no charset: the SDKs look for errors only under that type.
    return web.Response(body=orjson.dumps({"Response": body}), content_type="application/json")


def _admin_error(status: int, message: str) -> web.Response:
    return web.json_response({"Error": message}, status=status)


def _claimed_service(headers: dict[str, str]) -> str:
    """The service a request names before its signature is checked, for the log line.

    The credential scope's service (what the signature is checked against), else the first
    label of a `<service>.tencentcloudapi.com` Host, else `?`.
    """
    service = scope_service(headers.get("authorization", ""))
    if service is not None:
        return service
    host = headers.get("host", "").split(":")[0]
    label = host.split(".")[0]
    if host.endswith(API_HOST_SUFFIX) and _SERVICE_NAME.match(label):
        return label
    return "?"


class Emulator:
    def __init__(
        self,
        world: World,
        reclaim_rate_per_hour: float = 0.0,
        limits: LimitSettings | None = None,
        reclaim_rates: dict[tuple[str, str], float] | None = None,
        seed: int | None = None,
        misbehaviour: Misbehaviour | None = None,
    ) -> None:
        self.world = world
        self.faults: list[Fault] = []
        # Tencent's per-action request limits, when switched on (limits.py).
        self.limits = RequestLimits(limits or LimitSettings())
        self.reclaim_rate_per_hour = reclaim_rate_per_hour
        self.reclaim_rates = ReclaimRates(reclaim_rate_per_hour, reclaim_rates)
        self._random = random.Random(seed)
        # Lost answers, a lagging listing, ... on request (misbehaviour.py): off by default.
        self.misbehaviour = world.misbehaviour
        self.misbehaviour.random = self._random
        self.misbehaviour.configure(misbehaviour or Misbehaviour())
        # Every API call's arrival: what a test checks rate limits against.
        self.requests = RequestLog()

    # -- the cloud API ---------------------------------------------------------------------
    async def api(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        headers = {k.lower(): v for k, v in request.headers.items()}
        action = headers.get("x-tc-action") or request.query.get("Action", "")
        request_id = str(uuid.uuid4())
        call = Call(
            arrived=time.time(),
            started=started,
            request_id=request_id,
            action=action,
            region=headers.get("x-tc-region", "-"),
            client=headers.get("x-tc-requestclient", ""),
        )
        service_name = _claimed_service(headers)  # logged even when the signature fails
        params: dict[str, Any] | None = None
        who: str | None = None  # the signer's ARN (an assumed role's names its session)
        if self.misbehaviour.unavailable():  # a load balancer's 503: the API never sees it
            self.requests.add(call, service_name, HTTP_503, None)
            return web.Response(status=503, text=HTTP_503_BODY, content_type="text/html")
        try:
            body = await request.read()
            caller, principal = self._caller(request, headers, body, action)
            who = principal.arn if principal is not None else None
            service_name = caller.service
            params = self._params(request, body)
            reply = await self._serve(
                caller, principal, action, headers, params, request, request_id
            )
            code = "OK"
        except ApiError as error:
            code = error.code
            reply = {"Error": {"Code": error.code, "Message": error.message}}
        except Exception:
            log.exception("action=%s.%s failed inside the emulator", service_name, action)
            code = "InternalError"
            reply = {"Error": {"Code": code, "Message": _FAULT_MESSAGES[code]}}
        reply["RequestId"] = request_id
        if code == "OK" and self.misbehaviour.loses_answer(action):
            # It all happened; the answer never reaches the caller (aiohttp's write then finds
            # the connection closed and gives up quietly).
            lost = self.misbehaviour.lost(action, params, reply)
            self.requests.add(call, service_name, code, params, lost=lost, caller=who)
            drop_connection(request.transport)
        else:
            self.requests.add(call, service_name, code, params, caller=who)
        return _api_reply(reply)

    def _caller(
        self, request: web.Request, headers: dict[str, str], body: bytes, action: str
    ) -> tuple[Caller, Principal | None]:
        """Who signed the call (a temporary key's token checked too); an unsigned call only
        for the STS actions that take none (Authorization: SKIP)."""
        now = time.time()
        if headers.get("authorization") == "SKIP" and action in UNSIGNED_ACTIONS:
            return Caller(secret_id="", service="sts"), None
        caller = verify(
            SignedRequest(
                method=request.method,
                path=request.rel_url.path or "/",
                query=request.rel_url.raw_query_string,
                headers=headers,
                body=body,
            ),
            self.world.iam.secret_keys,
            now,
        )
        return caller, self.world.iam.principal(caller.secret_id, headers.get("x-tc-token"), now)

    async def _serve(
        self,
        caller: Caller,
        principal: Principal | None,
        action: str,
        headers: dict[str, str],
        params: dict[str, Any],
        request: web.Request,
        request_id: str,
    ) -> dict[str, Any]:
        service_name = caller.service
        host = headers.get("host", "").split(":")[0]
        if host.endswith(API_HOST_SUFFIX) and host.split(".")[0] != service_name:
            raise ApiError(
                "AuthFailure.SignatureFailure",
                f"The credential scope names service `{service_name}` but the host is `{host}`.",
            )
        service = SERVICES.get(service_name)
        if not action:
            raise ApiError("MissingParameter", "The request is missing the X-TC-Action header.")
        handler = service.actions.get(action) if service else None
        if service is None or handler is None:
            raise ApiError(
                "InvalidAction",
                f"The action `{action}` of service `{service_name}` is not emulated "
                "(or does not exist).",
            )
        version = headers.get("x-tc-version", "")
        if version != service.version:
            raise ApiError(
                "InvalidAction",
                f"The action `{action}` does not exist in version `{version}` of `{service_name}`"
                f" (it is {service.version}).",
            )
        if principal is not None and not principal.may(service_name, action):
            raise ApiError(
                "AuthFailure.UnauthorizedOperation",
                f"The CAM policy of {principal.arn} does not allow {service_name}:{action}.",
            )
        region = headers.get("x-tc-region") or request.query.get("Region", "")
        if service.regional and not region:
            raise ApiError("MissingParameter", "The request is missing the X-TC-Region header.")
        if region and region not in REGIONS:
            raise ApiError("UnsupportedRegion", f"The region `{region}` is not supported.")
        # Limits are the account's (a role's temporary keys share its account's buckets).
        account = principal.account if principal else ""
        if not self.limits.admit(account, region, service_name, action, time.monotonic()):
            raise ApiError("RequestLimitExceeded", LIMIT_MESSAGE)
        refusal = self.misbehaviour.refusal()  # throttled or failed on request: nothing done
        if refusal is not None:
            raise ApiError(refusal, _FAULT_MESSAGES[refusal])
        await self._inject_faults(service_name, action)
        ctx = Context(
            world=self.world, region=region, request_id=request_id, now=time.time(),
            account=principal.account if principal else DEFAULT_ACCOUNT, principal=principal,
        )  # fmt: skip
        return handler(ctx, params)

    @staticmethod
    def _params(request: web.Request, body: bytes) -> dict[str, Any]:
        if request.method == "GET":
            return dict(request.query)
        try:
            params = json.loads(body or b"{}")
        except json.JSONDecodeError as error:
            raise ApiError("InvalidParameter", f"The request body is not JSON: {error}.") from None
        if not isinstance(params, dict):
            raise ApiError("InvalidParameter", "The request body must be a JSON object.")
        return params

    async def _inject_faults(self, service: str, action: str) -> None:
        for fault in self.faults:
            if not fault.matches(service, action):
                continue
            if fault.latency_ms:
                await asyncio.sleep(fault.latency_ms / 1000)
            if fault.rate and self._random.random() < fault.rate:
                message = _FAULT_MESSAGES.get(fault.code, f"Injected fault {fault.code}.")
                raise ApiError(fault.code, message)

    # -- admin routes ----------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "instances": len(self.world.store.instances)})

    async def instances(self, request: web.Request) -> web.Response:
        self.world.advance()
        return web.json_response(
            {"Instances": [r.to_admin() for r in self.world.store.instances.values()]}
        )

    async def reclaim(self, request: web.Request) -> web.Response:
        try:
            asked = ReclaimRequest.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return _admin_error(
                400, f"expected {{InstanceIds: [...]}} or {{Count: N, Zone: Z}}: {error}"
            )
        self.world.advance()
        candidates = [
            r
            for r in self.world.store.instances.values()
            if r.spot and not r.gone and r.reclaim_at is None and r.state != "TERMINATING"
        ]
        if asked.instance_ids:
            by_id = {r.instance_id: r for r in candidates}
            missing = [i for i in asked.instance_ids if i not in by_id]
            if missing:
                return _admin_error(
                    404, f"not live spot instances (or already reclaimed): {', '.join(missing)}"
                )
            chosen = [by_id[i] for i in asked.instance_ids]
        elif asked.count is not None:
            pool = [r for r in candidates if asked.zone is None or r.zone == asked.zone]
            if len(pool) < asked.count:
                return _admin_error(
                    409, f"only {len(pool)} live spot instances to reclaim, {asked.count} asked"
                )
            chosen = self._random.sample(pool, asked.count)
        else:
            return _admin_error(400, "give InstanceIds or Count")
        self.world.reclaim(chosen)
        ids = [r.instance_id for r in chosen]
        log.info("admin=reclaim instances=%s", ",".join(ids))
        return web.json_response({"Reclaimed": ids})

    async def set_capacity(self, request: web.Request) -> web.Response:
        try:
            asked = CapacityRequest.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return _admin_error(400, f"expected {{Zone, InstanceType, Available}}: {error}")
        if not any(asked.zone in zones(region) for region in REGIONS):
            return _admin_error(400, f"unknown zone {asked.zone}")
        if asked.instance_type not in INSTANCE_TYPES:
            return _admin_error(400, f"unknown instance type {asked.instance_type}")
        self.world.store.set_capacity(asked.zone, asked.instance_type, asked.available)
        return await self.capacity(request)

    async def capacity(self, request: web.Request) -> web.Response:
        stock = self.world.store.capacity.items()
        return web.json_response(
            {"Capacity": [{"Zone": z, "InstanceType": t, "Available": n} for (z, t), n in stock]}
        )

    async def add_fault(self, request: web.Request) -> web.Response:
        try:
            fault = Fault.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return _admin_error(
                400, f"expected {{Service, Action, Code, Rate, LatencyMs}}: {error}"
            )
        self.faults.append(fault)
        return await self.list_faults(request)

    async def clear_faults(self, request: web.Request) -> web.Response:
        self.faults.clear()
        return await self.list_faults(request)

    async def list_faults(self, request: web.Request) -> web.Response:
        return web.json_response({"Faults": [f.model_dump(by_alias=True) for f in self.faults]})

    async def rate_limits(self, request: web.Request) -> web.Response:
        return web.json_response(self.limits.describe())

    async def set_rate_limits(self, request: web.Request) -> web.Response:
        try:
            asked = LimitSettings.model_validate(await request.json())
        except (ValidationError, json.JSONDecodeError) as error:
            return _admin_error(400, f"expected {{Enabled, Rates: {{Action: n}}, Other}}: {error}")
        self.limits.configure(asked)
        log.info("admin=rate-limits enabled=%s", asked.enabled)
        return await self.rate_limits(request)

    async def request_log(self, request: web.Request) -> web.Response:
        """The API calls received (arrival time, service, action, region, code, SDK client,
        signer, parameters with any password fingerprinted), oldest first; `?action=A` keeps
        one action's."""
        action = request.query.get("action")
        calls = [c for c in self.requests.calls if action is None or c["Action"] == action]
        return web.json_response({"Requests": calls})

    async def termination_time(self, request: web.Request) -> web.Response:
        """The instance-metadata answer a spot instance reads to learn it is being reclaimed."""
        record = self.world.store.instances.get(request.match_info["instance_id"])
        if record is None or record.termination_time is None:
            raise web.HTTPNotFound()
        beijing = datetime.fromtimestamp(record.termination_time, UTC) + timedelta(hours=8)
        return web.Response(text=beijing.strftime("%Y-%m-%d %H:%M:%S"))

    # -- random reclaims -------------------------------------------------------------------
    async def reclaim_at_random(self, app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self._reclaim_loop()) if self.reclaim_rates.any() else None
        yield
        if task is not None:
            task.cancel()

    async def _reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(1)
            self.reclaim_step()

    def reclaim_step(self) -> list[str]:
        """One second of random reclaims: each running spot instance at its zone x type's rate."""
        self.world.advance()
        doomed = [
            r
            for r in sorted(self.world.store.instances.values(), key=lambda r: r.instance_id)
            if r.spot
            and r.state == "RUNNING"
            and r.reclaim_at is None
            and self._random.random() < self.reclaim_rates.per_second(r.zone, r.instance_type)
        ]
        if doomed:
            self.world.reclaim(doomed)
            log.info("admin=random-reclaim instances=%s", ",".join(r.instance_id for r in doomed))
        return [r.instance_id for r in doomed]


def build_app(emulator: Emulator) -> web.Application:
    app = web.Application()
    app.router.add_get("/_emulator/health", emulator.health)
    app.router.add_get("/_emulator/instances", emulator.instances)
    app.router.add_post("/_emulator/reclaim", emulator.reclaim)
    app.router.add_get("/_emulator/capacity", emulator.capacity)
    app.router.add_post("/_emulator/capacity", emulator.set_capacity)
    app.router.add_get("/_emulator/faults", emulator.list_faults)
    app.router.add_get("/_emulator/requests", emulator.request_log)
    app.router.add_get("/_emulator/rate-limits", emulator.rate_limits)
    app.router.add_post("/_emulator/rate-limits", emulator.set_rate_limits)
    app.router.add_post("/_emulator/faults", emulator.add_fault)
    app.router.add_delete("/_emulator/faults", emulator.clear_faults)
    app.router.add_get(
        "/_emulator/metadata/{instance_id}/spot/termination-time", emulator.termination_time
    )
    app.router.add_route("POST", "/", emulator.api)
    app.router.add_route("GET", "/", emulator.api)
    app.cleanup_ctx.append(emulator.reclaim_at_random)
    add_price_routes(app, emulator.world)
    add_iam_routes(app, emulator.world)
    add_misbehaviour_routes(app, emulator.misbehaviour)
    return app
