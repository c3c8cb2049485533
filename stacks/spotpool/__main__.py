"""Entry point when the Pulumi CLI runs this project (`main: stacks/spotpool`)."""

from program import main

main()
