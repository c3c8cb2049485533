"""Entry of the `spotpool-operator` Pulumi project (Pulumi.yaml `main`): `pulumi up` here.

Pulumi runs this file as a script, so the package beside it is put on the path first.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spotpool_deploy.program import main

main()
