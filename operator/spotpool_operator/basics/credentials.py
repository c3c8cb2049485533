"""A pool's cloud credentials, in one of three forms: a Secret's key pair (with a token when the
keys are temporary; inline keys still work), a role assumed on top of the Secret's keys or of
the operator's own identity, or the operator's own identity alone (its service-account token
exchanged by AssumeRoleWithWebIdentity). Temporary credentials come from the process's one
cache (engine/tencent/identities.py), shared by every pool of the same identity.

What a pool may use is the cluster admin's (SpotpoolAccessPolicy, spotpool.api.access and
spotpool.api.grants): the install serving it, the operator's identity and roles, and on such a
shared identity what it launches with, only where a policy selecting the namespace grants them
and none refuses them; the external id the policies', the session name the operator's
(spotpool_<namespace>_<pool>, on a role and on the operator's identity alike), and a Secret
only when it opts in (or the policies list it). A refusal never says whether a Secret that is
not usable exists. Every temporary identity carries its grant's check: it is asked again at
each renewal and by the operator's periodic re-check (convergence/revocations.py), and an
identity refused is dropped at once."""

from collections.abc import Callable
from functools import partial

from pydantic import SecretStr

from spotpool.api.access import CONSENT_KEY, Access, Refusal
from spotpool.api.grants import DEFAULT_CLASS
from spotpool.api.identity import AssumeRole, session_name, sweep_session_name
from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.leftovers.accounts import AccountRecord
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.tencent.identities import CREDENTIALS, CredentialCache, Revoked, WebIdentity
from spotpool.engine.tencent.sts import StsError
from spotpool_operator.basics.failures import PoolProblem
from spotpool_operator.reporting.kube import Cluster, SecretNotFound, SecretRead

SECRET_REREAD = 60.0  # seconds: a Secret's temporary keys are read again at 2/3 of this
INLINE_WARNING = (
    "secretId/secretKey are stored in the Spotpool itself, readable by anyone who can read it: "
    "put them in a Secret and set credentialsSecretRef"
)
NO_OPERATOR_IDENTITY = (
    "useOperatorIdentity needs the operator installed with an identity of its own: set the "
    "chart's identity.roleArn and identity.providerId (the operator then gets TKE_ROLE_ARN, "
    "TKE_PROVIDER_ID and a projected service-account token in TKE_WEB_IDENTITY_TOKEN_FILE), "
    "or give the pool a credentialsSecretRef"
)
# What STS answers, as a condition reason and what to fix.
_STS_REASONS = {
    "UnauthorizedOperation": (
        "RoleNotTrusted",
        "add the caller (account, or OIDC issuer and subject) to the role's trust policy",
    ),
    "ResourceNotFound.RoleNotFound": (
        "RoleNotFound",
        "check assumeRole.roleArn (qcs::cam::uin/<account>:roleName/<name>)",
    ),
    "InvalidParameter.WebIdentityTokenError": (
        "WebIdentityRefused",
        "check that CAM's identity provider trusts the cluster's issuer and the token's audience",
    ),
}


def access_of(cluster: Cluster, namespace: str) -> Access:
    """What the policies selecting the namespace allow its pools."""
    policies = cluster.access_policies()
    labels = cluster.namespace_labels(namespace) if policies else {}
    return Access.of(namespace, labels, policies)


def refusal(access: Access, spec: SpotpoolSpec, launching: bool = True) -> Refusal | None:
    """Why the policies refuse this pool: its install, region, identity or role, or on a
    shared identity what it launches with (`launching`; None: allowed)."""
    found = (
        access.not_understood()
        or access.operator_class(spec.operator_class or DEFAULT_CLASS)
        or access.region(spec.region)
    )
    if found is None and spec.use_operator_identity:
        found = access.operator_identity()
    if found is None and spec.assume_role is not None:
        found = access.role(spec.assume_role.role_arn)
        external = access.external_id()
        if found is None and isinstance(external, Refusal):
            found = external
    return found or (access.launch(spec) if launching else None)


def grant_refusal(
    cluster: Cluster, namespace: str, spec: SpotpoolSpec, launching: bool = True
) -> Refusal | None:
    """`refusal` under the policies as they are now: the check every temporary identity of the
    pool carries (identities.py)."""
    return refusal(access_of(cluster, namespace), spec, launching)


def resolve(
    cluster: Cluster,
    namespace: str,
    name: str,
    spec: SpotpoolSpec,
    endpoint: str | None = None,
    cache: CredentialCache = CREDENTIALS,
    session: str | None = None,
    launching: bool = True,
) -> Credentials:
    """The credentials to run pool `namespace/name`'s operations with, or a PoolProblem saying
    what is wrong. A credentialsSecretRef wins over inline keys when both are set. Deleting
    asks too: a refused pool is deleted with the keys it last ran with here (unless its grant
    was revoked: they are gone), or, with none, only when it holds no instance (deletion.py).
    `session`: the STS session name, the pool's own unless given; `launching`: False for a
    use that launches nothing (the sweep), which the launch grants do not concern."""
    access = access_of(cluster, namespace)
    refused = refusal(access, spec, launching)
    if refused is not None:
        raise PoolProblem(refused.reason, refused.message)
    session = session or session_name(namespace, name)
    check = partial(grant_refusal, cluster, namespace, spec, launching)
    if spec.use_operator_identity:
        web = WebIdentity.from_env()
        if web is None:
            raise PoolProblem("OperatorIdentityMissing", NO_OPERATOR_IDENTITY, permanent=True)
        own = web.session(session)
        base = _from_sts(lambda: cache.web_identity(own, endpoint, check), web.role.role_arn)
    else:
        base = _keys(cluster, namespace, spec, access, cache)
    if spec.assume_role is None:
        return base
    external = access.external_id()
    role = AssumeRole(
        role_arn=spec.assume_role.role_arn,
        session_name=session,
        duration_seconds=spec.assume_role.duration_seconds,
        external_id=external if isinstance(external, str) else None,
    )
    return _from_sts(lambda: cache.role(base, role, endpoint, check), role.role_arn)


# Refusals whose code is shared by several causes, told apart by what STS says.
_EXTERNAL_ID = (
    "ExternalIdMismatch",
    "set the externalId of the SpotpoolAccessPolicy granting this role to the one the role's "
    "trust policy asks for (the spec's is not sent)",
)


def sts_problem(error: StsError, role_arn: str) -> PoolProblem:
    """The condition for an STS refusal: the cause first (a reason naming it, STS's own words),
    then what to fix."""
    if isinstance(error, Revoked):  # not STS's word: the access policies' (identities.py)
        return PoolProblem(error.code, error.message)
    if "externalid" in error.message.replace(" ", "").lower():
        reason, fix = _EXTERNAL_ID
    else:
        reason, fix = _STS_REASONS.get(error.code, ("AssumeRoleFailed", "see the STS error"))
    said = error.message.rstrip(". ")
    return PoolProblem(reason, f"STS refused role {role_arn}: {said} ({error.code}). To fix: {fix}")


def _from_sts(obtain: Callable[[], Credentials], role_arn: str) -> Credentials:
    try:
        return obtain()
    except StsError as error:
        raise sts_problem(error, role_arn) from None


def _keys(
    cluster: Cluster, namespace: str, spec: SpotpoolSpec, access: Access, cache: CredentialCache
) -> Credentials:
    """The Secret's (or the inline) keys. Temporary ones (with a token) someone else renews
    in the Secret are read again every SECRET_REREAD * 2/3 seconds while in use, so a Pulumi
    run longer than their life is re-signed with the Secret's new ones (the API proxy asks
    the cache for the live keys; identities.py)."""
    keys = _keys_once(cluster, namespace, spec, access)
    ref = spec.credentials_secret_ref
    if ref is None or keys.token is None:
        return keys

    def reread() -> Credentials:
        try:
            fresh = _keys_once(cluster, namespace, spec, access)
        except PoolProblem as problem:
            raise StsError("SecretUnreadable", str(problem)) from None
        return fresh.model_copy(update={"expires": cache.clock() + SECRET_REREAD})

    return cache.get(f"secret:{namespace}/{ref.name}", reread)


def _keys_once(cluster: Cluster, namespace: str, spec: SpotpoolSpec, access: Access) -> Credentials:
    ref = spec.credentials_secret_ref
    if ref is None:
        if spec.secret_id is None or spec.secret_key is None:
            raise PoolProblem(
                "CredentialsMissing",
                "set credentialsSecretRef, or useOperatorIdentity with the install's role",
                permanent=True,
            )
        return Credentials(
            secret_id=SecretStr(spec.secret_id), secret_key=SecretStr(spec.secret_key)
        )
    data = _usable(cluster, namespace, ref.name, access, "credentialsSecretRef")
    missing = [key for key in (ref.secret_id_key, ref.secret_key_key) if not data.get(key)]
    if missing:
        raise PoolProblem(
            "SecretKeyMissing",
            f"Secret {namespace}/{ref.name} has no (or an empty) {' and '.join(missing)}",
        )
    token = _text(data[ref.token_key]) if data.get(ref.token_key) else None
    return Credentials(
        secret_id=SecretStr(_text(data[ref.secret_id_key])),
        secret_key=SecretStr(_text(data[ref.secret_key_key])),
        token=SecretStr(token) if token else None,
    )


def _usable(
    cluster: Cluster, namespace: str, name: str, access: Access, field: str
) -> dict[str, bytes]:
    """The data of a Secret the pool may use; one answer for a Secret that is missing, not
    readable or not opted in, so that a refusal tells nobody which Secrets exist."""
    try:
        found: SecretRead | None = cluster.read_secret(namespace, name)
    except SecretNotFound:
        found = None
    if found is not None and (access is None or found.consents or access.secret_allowed(name)):
        return found.data
    raise PoolProblem(
        "SecretNotFound",
        f"Secret {namespace}/{name} ({field}) is not found or does not opt in to Spotpool: "
        f'create it, and label it {CONSENT_KEY}="true" (or ask the cluster admin for a '
        "SpotpoolAccessPolicy listing it in secrets), or fix " + field,
    )


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace").strip()


def login_password(cluster: Cluster, namespace: str, spec: SpotpoolSpec) -> str | None:
    """The login password from loginSettings.passwordSecretRef, if the pool uses one."""
    ref = spec.login_settings.password_secret_ref if spec.login_settings else None
    if ref is None:
        return None
    access = access_of(cluster, namespace)
    data = _usable(cluster, namespace, ref.name, access, "loginSettings.passwordSecretRef")
    if not data.get(ref.key):
        raise PoolProblem(
            "SecretKeyMissing", f"Secret {namespace}/{ref.name} has no (or an empty) {ref.key}"
        )
    return _text(data[ref.key])


# A valid spec whose only parts that matter are where its credentials come from and which
# install serves it (credentials_of): it launches nothing.
_SPEC_SHELL = {"instanceType": "S5.MEDIUM2", "minimum": 0, "maximum": 1, "imageId": "img-0"}


def credentials_of(
    cluster: Cluster, record: AccountRecord, endpoint: str | None = None, operator_class: str = ""
) -> Credentials:
    """The credentials a recorded account (engine/leftovers/accounts.py) names, resolved as its
    pool's were, for this install (`operator_class`): its Secret read again (if it still opts
    in), its role assumed again (if a policy still allows it), under the sweep's own session
    (spotpool_<namespace>_=sweep)."""
    shell = {**_SPEC_SHELL, "region": record.region, "availabilityZone": f"{record.region}-1"}
    if operator_class:
        shell["operatorClass"] = operator_class
    spec = SpotpoolSpec.model_validate({**shell, **record.source})
    session = sweep_session_name(record.namespace)
    return resolve(cluster, record.namespace, "", spec, endpoint, session=session, launching=False)
