"""The engine: one Pulumi stack per Spotpool, driven through the Automation API.

Sub-packages, top to bottom, each importing only those below it:
- stacks: A pool's Pulumi stack as the operator drives it.
- launches: Instances started beside or ahead of a Pulumi run.
- runs: One Pulumi run on a pool's stack.
- leftovers: What a killed run or a deletion leaves behind.
- state: What the state backend holds and how the engine reads it without the CLI.
- basics: What every part of the engine speaks.
- fencing: Who may write a pool's stack, checked where the write lands.
- tencent: The Tencent Cloud API beside Pulumi.
"""
