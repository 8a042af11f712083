#!/bin/sh
# The gateway benchmark in one command: builds rebound, installs Portkey's
# gateway with npm (once) and Debian's nginx with apt-get (when missing),
# starts them in front of a canned upstream on the loopback and measures
# them with vegeta. Flags go to the Go program; see `./run.sh -h`. Needs Go,
# Node and npm, and for nginx apt-get (as root, or with sudo).
set -e
cd "$(dirname "$0")"
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] && command -v apt-get >/dev/null 2>&1; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	# The package's own service is not what is measured: the harness runs
	# nginx as its child with a configuration of its own.
	# Its output goes to stderr: with -json, stdout holds the report alone.
	{ $sudo apt-get update -q && $sudo apt-get install -y -q nginx; } >&2 || echo "run.sh: could not install nginx; it will be skipped" >&2
fi
exec go run . "$@"
