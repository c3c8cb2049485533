"""A pool's `up` run in a child process the tests kill mid-run (a replica killed under a
Pulumi run): the script the child runs, given settings, identity and keys as arguments."""

KILLED_UP = """
import sys, uuid
from pydantic import SecretStr
from spotpool.api.stackconfig import PoolIdentity
from spotpool.engine.tencent.credentials import Credentials
from spotpool.engine.basics.settings import EngineSettings
from spotpool.engine.stacks.stack import PoolStack
from tests.engine.conftest import REGION, pool_spec
from spotpool.api.stackconfig import StackConfig

settings = EngineSettings.model_validate_json(sys.argv[1])
identity = PoolIdentity.model_validate_json(sys.argv[2])
creds = Credentials(secret_id=SecretStr(sys.argv[3]), secret_key=SecretStr(sys.argv[4]))
stack = PoolStack(identity, settings, creds, REGION, lambda line: print(line, flush=True))
stack.up(StackConfig.from_spec(identity, pool_spec(4)))
"""
