// Command legs splits the latency a proxy adds into the legs of a
// request's path, from a packet capture of a bench/gateway run on the
// loopback: for each request, the time from the client's request reaching
// the proxy to the proxy's request leaving for the upstream (in), the
// upstream's time to its answer (upstream), the time from the answer's
// first bytes to the proxy's first bytes to the client (out), and the
// whole, to the proxy's last bytes to the client (whole). A figure that
// differs between two proxies says in which leg the difference lies, which
// a client's latency alone cannot.
//
// Capture the data-bearing segments only, with their times, and read the
// capture as text:
//
//	tcpdump -i lo -tt -n -s 96 'tcp[tcpflags] & tcp-push != 0' -w run.pcap &
//	go run .. -targets hop,rebound -rates 500 -search=false -rounds 1 -slice 0
//	kill %1
//	tcpdump -r run.pcap -tt -n | go run .
//
// Listening ports are told from clients' by the number of peers they
// have; the one with most is the upstream, whose answers every target
// waits for. Each other listener is a proxy, reported in the order its
// traffic began (the harness measures the targets in -targets order in
// its first round). A proxy's traffic is split into phases at gaps of
// over half a second (a warm-up, a step of each mode: hence -slice 0,
// one step per target rather than turns, each its own phase), and a phase's
// requests are told apart by time: each request from a client begins
// one, so the figures hold for a fixed rate low enough that requests to
// one proxy rarely overlap (500 a second with sub-millisecond answers).
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// segment is one data-bearing TCP segment on the loopback.
type segment struct {
	at       time.Duration // since the epoch
	src, dst int           // ports
	bytes    int
}

func main() {
	segs, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "legs:", err)
		os.Exit(1)
	}
	// A capture's times may step back between cores; the phases are cut
	// by searching them in order.
	slices.SortStableFunc(segs, func(a, b segment) int { return int(a.at - b.at) })
	upstream, proxies := listeners(segs)
	if upstream == 0 || len(proxies) == 0 {
		fmt.Fprintln(os.Stderr, "legs: no upstream and proxy found in the capture (is it of a bench/gateway run on the loopback?)")
		os.Exit(1)
	}
	fmt.Printf("upstream port %d; medians per phase (and the whole's 99th percentile), in microseconds\n", upstream)
	fmt.Println("proxy\tphase\trequests\tin\tupstream\tout\twhole\twhole p99\tsegments in/up/down/out")
	for _, p := range proxies {
		for i, ph := range phases(segs, p) {
			r := legsOf(ph, p, upstream)
			if r.requests == 0 {
				continue
			}
			fmt.Printf("%d\t%d (%.1fs)\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f/%.2f/%.2f/%.2f\n", p, i+1,
				(ph[len(ph)-1].at - ph[0].at).Seconds(), r.requests, r.in, r.upstream, r.out, r.whole, r.wholeP99,
				r.segments[0], r.segments[1], r.segments[2], r.segments[3])
		}
	}
}

// parse reads tcpdump's text ("-tt -n"): a line per segment, its time in
// seconds since the epoch first, then "IP A.B.C.D.PORT > E.F.G.H.PORT:",
// its length last. Other lines are skipped.
func parse(r io.Reader) ([]segment, error) {
	var segs []segment
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[1] != "IP" || f[3] != ">" {
			continue
		}
		secs, err := strconv.ParseFloat(f[0], 64)
		src, ok1 := port(f[2])
		dst, ok2 := port(strings.TrimSuffix(f[4], ":"))
		n, err2 := strconv.Atoi(f[len(f)-1])
		if err != nil || err2 != nil || !ok1 || !ok2 {
			continue
		}
		segs = append(segs, segment{at: time.Duration(secs * float64(time.Second)), src: src, dst: dst, bytes: n})
	}
	return segs, sc.Err()
}

// port is the port of an address written A.B.C.D.PORT.
func port(addr string) (int, bool) {
	i := strings.LastIndexByte(addr, '.')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.Atoi(addr[i+1:])
	return p, err == nil
}

// listeners finds the listening ports: those sent to from more than three
// ports. The one with most peers is the upstream; the others are given in
// the order their traffic began.
func listeners(segs []segment) (upstream int, proxies []int) {
	peers := map[int]map[int]bool{}
	first := map[int]time.Duration{}
	for _, s := range segs {
		if peers[s.dst] == nil {
			peers[s.dst] = map[int]bool{}
			first[s.dst] = s.at
		}
		peers[s.dst][s.src] = true
	}
	var ports []int
	for p, from := range peers {
		if len(from) > 3 {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		return 0, nil
	}
	upstream = slices.MaxFunc(ports, func(a, b int) int { return len(peers[a]) - len(peers[b]) })
	for _, p := range ports {
		if p != upstream {
			proxies = append(proxies, p)
		}
	}
	slices.SortFunc(proxies, func(a, b int) int { return int(first[a] - first[b]) })
	return upstream, proxies
}

// phases splits the capture into the stretches of traffic to proxy, at
// gaps of over half a second, each with every segment of its time.
func phases(segs []segment, proxy int) [][]segment {
	var out [][]segment
	start, last := -1, time.Duration(0)
	for i, s := range segs {
		if s.dst != proxy {
			continue
		}
		if start >= 0 && s.at-last > 500*time.Millisecond {
			out = append(out, within(segs, segs[start].at, last))
			start = -1
		}
		if start < 0 {
			start = i
		}
		last = s.at
	}
	if start >= 0 {
		out = append(out, within(segs, segs[start].at, last))
	}
	return out
}

// within is the segments from from to to.
func within(segs []segment, from, to time.Duration) []segment {
	i, _ := slices.BinarySearchFunc(segs, from, func(s segment, t time.Duration) int { return int(s.at - t) })
	j, _ := slices.BinarySearchFunc(segs, to+1, func(s segment, t time.Duration) int { return int(s.at - t) })
	return segs[i:j]
}

// legs are a phase's medians, in microseconds, and the segments a request
// took on each leg, on average.
type legs struct {
	requests                 int
	in, upstream, out, whole float64
	wholeP99                 float64
	segments                 [4]float64 // in, up, down, out
}

// legsOf measures a phase of proxy's traffic. A segment to proxy begins a
// request; the proxy's clients' ports are the ones those come from, and
// any other port that talks to the upstream is the proxy's own.
func legsOf(ph []segment, proxy, upstream int) legs {
	clients := map[int]bool{}
	for _, s := range ph {
		if s.dst == proxy {
			clients[s.src] = true
		}
	}
	type request struct {
		in, up, down, out, last time.Duration
		segments                [4]int
	}
	var done []request
	var cur *request
	for _, s := range ph {
		switch {
		case s.dst == proxy:
			if cur != nil && cur.out != 0 {
				done = append(done, *cur)
			}
			cur = &request{in: s.at, segments: [4]int{1}}
		case cur == nil:
		case s.dst == upstream && !clients[s.src]:
			cur.segments[1]++
			if cur.up == 0 {
				cur.up = s.at
			}
		case s.src == upstream && !clients[s.dst]:
			cur.segments[2]++
			if cur.up != 0 && cur.down == 0 {
				cur.down = s.at
			}
		case s.src == proxy:
			cur.segments[3]++
			if cur.down != 0 && cur.out == 0 {
				cur.out = s.at
			}
			cur.last = s.at
		}
	}
	if cur != nil && cur.out != 0 {
		done = append(done, *cur)
	}
	var r legs
	var in, up, out, whole []time.Duration
	for _, q := range done {
		if q.up == 0 || q.down == 0 {
			continue
		}
		in, up, out, whole = append(in, q.up-q.in), append(up, q.down-q.up), append(out, q.out-q.down), append(whole, q.last-q.in)
		for k := range r.segments {
			r.segments[k] += float64(q.segments[k])
		}
	}
	if r.requests = len(in); r.requests == 0 {
		return r
	}
	for k := range r.segments {
		r.segments[k] /= float64(r.requests)
	}
	r.in, r.upstream, r.out, r.whole = micros(in, 0.5), micros(up, 0.5), micros(out, 0.5), micros(whole, 0.5)
	r.wholeP99 = micros(whole, 0.99)
	return r
}

// micros is quantile q of ds (0.5, the median), in microseconds.
func micros(ds []time.Duration, q float64) float64 {
	slices.Sort(ds)
	return float64(ds[min(int(float64(len(ds))*q), len(ds)-1)]) / float64(time.Microsecond)
}
