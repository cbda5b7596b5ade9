package stub

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/narwhal-bench/narwhal-bench/engine"
	"github.com/narwhal-bench/narwhal-bench/fleet"
)

// FromFleet returns one Instance per fleet instance: its engine id is
// the instance's name (else e<i>), its address the host:port of its url,
// or 127.0.0.1:basePort+i when basePort > 0 or the instance has no url;
// profile and batch come from the fleet file. It also returns the
// fleet's KV model in opts.KV.
func FromFleet(spec *fleet.Spec, basePort int, opts *Options) ([]Instance, error) {
	profiles := spec.Profiles()
	if basePort < 0 || basePort > 0 && basePort+len(profiles)-1 > 65535 {
		return nil, fmt.Errorf("base port %d: %d engines on ports %d to %d: expected ports from 1 to 65535", basePort, len(profiles), basePort, basePort+len(profiles)-1)
	}
	var b fleet.Batch
	if spec.Batch != nil {
		b = *spec.Batch
	}
	out := make([]Instance, len(profiles))
	for i, p := range profiles {
		in := Instance{ID: "e" + strconv.Itoa(i),
			Engine: engine.Config{Profile: p, Batch: b}}
		var raw string
		if i < len(spec.Instances.List) {
			x := spec.Instances.List[i]
			if x.Name != "" {
				in.ID = x.Name
			}
			raw = x.URL
		}
		switch {
		case basePort > 0 || raw == "":
			port := basePort
			if port <= 0 {
				port = DefaultBasePort
			}
			in.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port+i))
		default:
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" || u.Port() == "" {
				return nil, fmt.Errorf("instances.list[%d].url: %q: expected http://host:port", i, raw)
			}
			in.Addr = u.Host
		}
		out[i] = in
	}
	seen := map[string]int{}
	for i, in := range out {
		if j, dup := seen[in.Addr]; dup {
			return nil, fmt.Errorf("instances.list[%d] (%s): address %s is also engine %s's: expected one engine per address", i, in.ID, in.Addr, out[j].ID)
		}
		seen[in.Addr] = i
	}
	if opts != nil {
		opts.KV = spec.KVModel()
	}
	return out, nil
}

// DefaultBasePort is the first port when neither --base-port nor urls
// say (the reference stub's).
const DefaultBasePort = 8101

// StartLoopback starts one stub engine per fleet instance on free
// loopback ports (tests and in-process runs); Servers()[i].URL() says
// where each listens.
func StartLoopback(spec *fleet.Spec, opts Options) (*Fleet, error) {
	insts, err := FromFleet(spec, 0, &opts)
	if err != nil {
		return nil, err
	}
	for i := range insts {
		insts[i].Addr = "127.0.0.1:0"
	}
	f, err := NewFleet(opts, insts)
	if err != nil {
		return nil, err
	}
	if err := f.Start(); err != nil {
		return nil, err
	}
	return f, nil
}
