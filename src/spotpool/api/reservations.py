"""A SpotpoolAccessPolicy's ledger, in its status: what each pool of the namespaces it limits
has reserved against the limits (`status.reservations`, keyed by the pool's uid) and the sums
(`status.reserved`). The operator raises a pool's entry before any launch, with the API
server's optimistic concurrency (the policy's resourceVersion), so pools growing at once on
any replica cannot pass a limit together; it lowers the entry only once the instances are gone
(docs/access.md, "Limits: reserved before the launch")."""

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Reservation(_Model):
    """What one pool may hold at once (its slots and surge instances), reserved before it
    launches them."""

    namespace: str = Field(description="The pool's namespace.")
    pool: str = Field(description="The pool's name.")
    instances: int = Field(0, ge=0, description="Instances, surges and rollouts included.")
    gpus: int = Field(0, ge=0, description="Their GPUs (the cloud's count per instance type).")
    hourly_cost: float = Field(0.0, ge=0, description="What they may cost an hour.")
    retained: bool = Field(
        False,
        description="The pool was deleted with deletionPolicy Retain and its instances kept: "
        "they count against the limits until the cluster admin releases them (removes this "
        "entry).",
    )


class Reserved(_Model):
    """The reservations summed over every namespace of the policy (each limit is per
    namespace: status.usage and status.reservations say which)."""

    instances: int = Field(0, description="Instances reserved.")
    gpus: int = Field(0, description="GPUs reserved.")
    hourly_cost: float = Field(0.0, description="Hourly cost reserved.")


def reserved(entries: dict[str, Reservation]) -> Reserved:
    return Reserved(
        instances=sum(e.instances for e in entries.values()),
        gpus=sum(e.gpus for e in entries.values()),
        hourly_cost=round(sum(e.hourly_cost for e in entries.values()), 6),
    )
