"""A pool's cloud credentials: from its credentialsSecretRef, else from the inline fields."""

from pydantic import SecretStr

from spotpool.api.spec import SpotpoolSpec
from spotpool.engine.credentials import Credentials
from spotpool_operator.failures import PoolProblem
from spotpool_operator.kube import Cluster, SecretNotFound

INLINE_WARNING = (
    "secretId/secretKey are stored in the Spotpool itself, readable by anyone who can read it: "
    "put them in a Secret and set credentialsSecretRef"
)


def resolve(cluster: Cluster, namespace: str, spec: SpotpoolSpec) -> Credentials:
    """The key pair to run this pool's operations with, or a PoolProblem saying what is wrong.

    A credentialsSecretRef wins over inline keys when both are set.
    """
    ref = spec.credentials_secret_ref
    if ref is None:
        if spec.secret_id is None or spec.secret_key is None:
            raise PoolProblem("CredentialsMissing", "set credentialsSecretRef", permanent=True)
        return Credentials(
            secret_id=SecretStr(spec.secret_id), secret_key=SecretStr(spec.secret_key)
        )
    try:
        data = cluster.read_secret(namespace, ref.name)
    except SecretNotFound as error:
        raise PoolProblem(
            "SecretNotFound", f"{error}: create it or fix credentialsSecretRef"
        ) from None
    missing = [key for key in (ref.secret_id_key, ref.secret_key_key) if not data.get(key)]
    if missing:
        raise PoolProblem(
            "SecretKeyMissing",
            f"Secret {namespace}/{ref.name} has no (or an empty) {' and '.join(missing)}",
        )
    return Credentials(
        secret_id=SecretStr(_text(data[ref.secret_id_key])),
        secret_key=SecretStr(_text(data[ref.secret_key_key])),
    )


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace").strip()


def login_password(cluster: Cluster, namespace: str, spec: SpotpoolSpec) -> str | None:
    """The login password from loginSettings.passwordSecretRef, if the pool uses one."""
    ref = spec.login_settings.password_secret_ref if spec.login_settings else None
    if ref is None:
        return None
    try:
        data = cluster.read_secret(namespace, ref.name)
    except SecretNotFound as error:
        raise PoolProblem(
            "SecretNotFound", f"{error}: loginSettings.passwordSecretRef names it"
        ) from None
    if not data.get(ref.key):
        raise PoolProblem(
            "SecretKeyMissing", f"Secret {namespace}/{ref.name} has no (or an empty) {ref.key}"
        )
    return _text(data[ref.key])
