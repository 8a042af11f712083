package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
)

// nginxConfig is nginx set up as a careful operator sets it up in front of
// an LLM API: answers streamed as they come (proxy_buffering off), HTTP/1.1
// with a pool of kept-alive connections to the upstream (and Connection
// cleared, or nginx would close each one), the request body read before it
// is forwarded (the default, as hop does), no access log, a worker for each
// core. It runs in the foreground, as the harness's child, with everything
// it writes under its own temporary prefix.
var nginxConfig = template.Must(template.New("nginx.conf").Parse(`daemon off;
worker_processes auto;
pid {{.Dir}}/nginx.pid;
error_log stderr warn;
events {
	worker_connections 8192;
}
http {
	access_log off;
	client_body_temp_path {{.Dir}}/client_body;
	proxy_temp_path {{.Dir}}/proxy;
	fastcgi_temp_path {{.Dir}}/fastcgi;
	uwsgi_temp_path {{.Dir}}/uwsgi;
	scgi_temp_path {{.Dir}}/scgi;
	keepalive_requests 100000;
	upstream llm {
		server {{.Upstream}};
		keepalive 256;
		keepalive_requests 100000;
	}
	server {
		listen {{.Listen}};
		location / {
			proxy_pass http://llm;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
`))

// nginxBinary finds nginx: on the PATH, or where Debian's package puts it
// (/usr/sbin, which is not on every user's PATH).
func nginxBinary() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New("nginx is not installed (run.sh installs Debian's package with apt-get)")
}

// nginxVersion is what `nginx -v` says, "nginx/1.22.1"; empty if nginx is
// missing.
func nginxVersion() string {
	bin, err := nginxBinary()
	if err != nil {
		return ""
	}
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
}

// startNginx runs nginx in front of upstream on a free loopback port, with
// its configuration and files in a temporary folder removed when it stops.
func startNginx(ctx context.Context, upstream string) (*child, target, func(), error) {
	bin, err := nginxBinary()
	if err != nil {
		return nil, target{}, nil, err
	}
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, target{}, nil, fmt.Errorf("nginx: upstream %q is not a URL", upstream)
	}
	port, err := freePort()
	if err != nil {
		return nil, target{}, nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dir, err := os.MkdirTemp("", "gateway-nginx-")
	if err != nil {
		return nil, target{}, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	conf := filepath.Join(dir, "nginx.conf")
	f, err := os.Create(conf)
	if err == nil {
		err = nginxConfig.Execute(f, struct{ Dir, Upstream, Listen string }{dir, u.Host, addr})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return nil, target{}, nil, fmt.Errorf("nginx: writing its configuration: %w", err)
	}
	// -e: the error log before the configuration is read, which otherwise
	// goes to the system's log folder.
	c, err := start("nginx", exec.CommandContext(ctx, bin, "-p", dir, "-c", conf, "-e", "stderr"))
	if err != nil {
		cleanup()
		return nil, target{}, nil, err
	}
	stop := func() { c.stop(); cleanup() }
	if err := awaitHTTP(ctx, "http://"+addr+"/", c.exited); err != nil {
		err = c.failure(err) // while its stderr is open
		stop()
		return nil, target{}, nil, err
	}
	return c, target{name: "nginx", url: "http://" + addr + "/v1/chat/completions", pid: c.pid()}, stop, nil
}
