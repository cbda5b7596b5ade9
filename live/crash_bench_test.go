package live

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-bench/narwhal-bench/event"
	"github.com/narwhal-bench/narwhal-bench/live/stub"
)

// BenchmarkEngineCrash is the engine-crash figure (docs/operations.md): a
// 2P2D stub fleet under an open-loop load of streamed requests; one decode
// engine is killed (kill -9: connections dropped, KV lost) 1 s in and
// restarted 1 s later. It reports the requests affected, how each ended,
// and the time to eject and to readmit. Run with -benchtime 1x.
func BenchmarkEngineCrash(b *testing.B) {
	for i := 0; i < b.N; i++ {
		one := 1.0
		r := startRig(b, rigOpts{n: 4, arm: "static:2P2D", stub: stub.Options{TimeScale: &one},
			configure: func(c *Config) { c.SweepInterval = 200 * time.Millisecond; c.ProbeInterval = 100 * time.Millisecond }})
		victim := r.stubs.Servers()[2]
		const rate, dur = 100.0, 3 * time.Second
		var wg sync.WaitGroup
		var mu sync.Mutex
		client := map[string]int{}
		start := time.Now()
		var killAt, restartAt event.Time
		go func() {
			time.Sleep(time.Second)
			killAt = r.router.now()
			victim.Kill()
			time.Sleep(time.Second)
			restartAt = r.router.now()
			if err := victim.Restart(); err != nil {
				b.Error(err)
			}
		}()
		for k := 0; time.Since(start) < dur; k++ {
			time.Sleep(time.Until(start.Add(time.Duration(float64(k) / rate * float64(time.Second)))))
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				q, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", strings.NewReader(
					fmt.Sprintf(`{"model":"stub","prompt":"crash figure %d","max_tokens":60,"min_tokens":60,"stream":true}`, k)))
				resp, err := http.DefaultClient.Do(q)
				kind := "transport error"
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case resp.StatusCode != 200:
						kind = fmt.Sprintf("status %d", resp.StatusCode)
					case strings.Contains(string(body), `"error"`):
						kind = "error event"
					case strings.Contains(string(body), "[DONE]"):
						kind = "complete"
					default:
						kind = "truncated"
					}
				}
				mu.Lock()
				client[kind]++
				mu.Unlock()
			}(k)
		}
		wg.Wait()
		time.Sleep(300 * time.Millisecond)
		r.stop()
		recs := r.jr.records()
		rows := checkJournal(b, recs)
		var downAt, upAt event.Time = -1, -1
		retried := map[event.RequestID]bool{}
		for _, rec := range recs {
			switch {
			case rec.Kind == event.KindHealth && rec.Inst == 2 && rec.Text == "down" && downAt < 0:
				downAt = rec.At
			case rec.Kind == event.KindHealth && rec.Inst == 2 && rec.Text == "up" && upAt < 0:
				upAt = rec.At
			case rec.Kind == event.KindDecision && strings.Contains(rec.Text, `"retry"`):
				var id event.RequestID
				fmt.Sscanf(rec.Text[strings.Index(rec.Text, `"retry":`)+8:], "%d", &id)
				retried[id] = true
			}
		}
		ended := map[string]int{}
		affected := 0
		for _, row := range rows {
			if retried[row.Req] || row.Terminal != event.KindFinish {
				affected++
				key := row.Terminal.String() + "/" + row.Cause.String()
				if retried[row.Req] {
					key = "re-placed, then " + key
				}
				ended[key]++
			}
		}
		var keys []string
		for k := range ended {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, ended[k]))
		}
		var ck []string
		for k, n := range client {
			ck = append(ck, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(ck)
		b.Logf("requests %d, affected %d: %s; clients saw: %s; eject %.0f ms after the kill, readmitted (generation 1) %.0f ms after the restart",
			len(rows), affected, strings.Join(parts, ", "), strings.Join(ck, ", "),
			(downAt-killAt).Seconds()*1000, (upAt-restartAt).Seconds()*1000)
		b.ReportMetric(float64(len(rows)), "requests")
		b.ReportMetric(float64(affected), "affected")
		b.ReportMetric((downAt-killAt).Seconds()*1000, "ms-to-eject")
		b.ReportMetric((upAt-restartAt).Seconds()*1000, "ms-to-readmit")
	}
}
