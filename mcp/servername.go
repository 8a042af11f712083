package reboundmcp

import (
	"path/filepath"
	"strings"
)

// runners are the commands that fetch a package and run it, as MCP
// servers are usually started, by their name and the words before the
// package ("pipx run PACKAGE"). Naming such a server after its command
// would name every server "npx".
var runners = map[string][]string{
	"npx":  nil,
	"bunx": nil,
	"pnpx": nil,
	"uvx":  nil,
	"pipx": {"run"},
	"npm":  {"exec"},
	"pnpm": {"dlx"},
	"yarn": {"dlx"},
	"uv":   {"tool", "run"},
}

// valueFlags are the runners' flags that take the next argument as their
// value, which is not the package.
var valueFlags = map[string]bool{
	"-p": true, "--package": true, "--from": true, "--with": true,
	"--python": true, "--spec": true, "-c": true, "--call": true,
}

// commandName is the name of a server run by the command at path with
// args: the package a runner fetches (npx -y @scope/server-memory@1.2 is
// server-memory, uvx mcp-server-fetch is mcp-server-fetch), or else the
// command's base name.
func commandName(path string, args []string) string {
	base := filepath.Base(path)
	words, ok := runners[strings.TrimSuffix(base, ".exe")]
	if !ok {
		return base
	}
	for _, w := range words {
		if len(args) == 0 || args[0] != w {
			return base
		}
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			continue
		case valueFlags[a]:
			i++
			continue
		case strings.HasPrefix(a, "-"):
			continue
		}
		if name := packageName(a); name != "" {
			return name
		}
		return base
	}
	return base
}

// packageName is a package spec's name without its scope, path, version
// or extras: "@modelcontextprotocol/server-memory@1.2.3" is
// "server-memory", "mcp-server-git==0.6" and "pkg[cli]" are themselves.
func packageName(spec string) string {
	spec = spec[strings.LastIndex(spec, "/")+1:]
	if i := strings.IndexAny(spec, "@=<>~![ "); i >= 0 {
		spec = spec[:i]
	}
	return spec
}
