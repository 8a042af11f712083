#!/bin/sh
# The gateway benchmark in one command: builds rebound, installs Portkey's
# gateway with npm (once), starts both in front of a canned upstream on the
# loopback and measures them with vegeta. Flags go to the Go program; see
# `./run.sh -h`. Needs Go, Node and npm.
set -e
cd "$(dirname "$0")"
exec go run . "$@"
