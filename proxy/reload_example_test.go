package proxy_test

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/rebound-go/rebound/proxy"
)

// A server whose handler is the Proxy of the config loaded last: a new
// config replaces the old without a request in flight noticing, and a bad
// one is refused while the old one stays.
func ExampleProxy_Reload() {
	load := func(file string) *proxy.FileConfig {
		c, err := proxy.ParseConfig([]byte(file), os.Getenv)
		if err != nil {
			fmt.Println("refused:", err)
			return nil
		}
		return c
	}
	p, err := proxy.New(proxy.Options{Config: load(`{"upstreams":{"a":{"url":"http://127.0.0.1:9001"}}}`)})
	if err != nil {
		log.Fatal(err)
	}
	var live atomic.Pointer[proxy.Proxy]
	live.Store(p)
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		live.Load().ServeHTTP(w, r) // the whole request on the Proxy it found
	})}
	_ = server // server.ListenAndServe() in a program
	fmt.Println("config", live.Load().ConfigVersion())

	// On SIGHUP, say: the file read again.
	for _, file := range []string{
		`{"upstreams":{"a":{"url":"http://127.0.0.1:9001"},"b":{"url":"http://127.0.0.1:9002"}},
		  "routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}]}`,
		`{"upstreams":{"a":{"url":"http://127.0.0.1:9001"}},"routes":[{"upstream":"c"}]}`,
	} {
		if c := load(file); c != nil {
			q, err := live.Load().Reload(c)
			if err != nil {
				fmt.Println("refused:", err)
				continue
			}
			live.Store(q)
		}
		fmt.Println("config", live.Load().ConfigVersion())
	}
	// Output:
	// config 9481482dd991
	// config cf6e7218507c
	// refused: config: routes[0].upstream: unknown upstream "c"
	// config cf6e7218507c
}
