#!/bin/sh
# The image's entry point: `spotpool "$@"` (by default `spotpool operator run`).
#
# Pulumi writes to its home (logins, workspace files) while the pod's root filesystem is
# read-only, so PULUMI_HOME is a writable volume; the plugins built into the image are linked
# into it here, so that Pulumi finds them where it looks and never tries to download one.
set -eu
mkdir -p "$PULUMI_HOME"
if [ ! -e "$PULUMI_HOME/plugins" ]; then
    ln -s "$SPOTPOOL_PLUGINS" "$PULUMI_HOME/plugins"
fi
exec spotpool "$@"
