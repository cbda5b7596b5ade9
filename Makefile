# narwhal-bench: the two commands a newcomer needs are `make demo` and `make test`.
GO        ?= go
BIN       := bin/narwhal-bench
DEMORATES := 0.6,1.0,1.6,2.4,3.2,4.4,5.4,6.4
# The demo's arms: every static split of the 8-instance demo fleet, aggregated, the
# adaptive controllers, and the hindsight oracle.
DEMOARMS  := static:1P7D,static:2P6D,static:3P5D,static:4P4D,static:5P3D,static:6P2D,static:7P1D,aggregated,adaptive,arrow,planner,coldswap,oracle
PKGS      := ./...


.PHONY: all build install deps demo demo-live test vet fmtcheck lint bench bench-scale bench-router bench-vs-python fuzz clean campaign reproduce burstiness soak

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/narwhal-bench
	$(GO) build -trimpath -o bin/narwhal-sim ./cmd/narwhal-sim
	$(GO) build -trimpath -o bin/narwhal-report ./cmd/narwhal-report

## install: go install the three commands into $(go env GOBIN), by default
## $(go env GOPATH)/bin (narwhal-sim hands --journal to narwhal-bench there).
install:
	$(GO) install -trimpath ./cmd/narwhal-bench ./cmd/narwhal-sim ./cmd/narwhal-report

## campaign: the seed evaluation (chatdoc and mixed x prefix caching off/on x seeds 1-5 x
## adaptive, dynamo, ray), regenerating docs/evaluation.md and its plots.
campaign: build
	campaigns/seed-eval.sh out/seed-eval
	cp out/seed-eval/evaluation.md docs/evaluation.md
	mkdir -p docs/img/eval
	cp out/seed-eval/seed-chatdoc/cache-on/seed-1/plots/prefill_share.png docs/img/eval/chatdoc-cache-on-prefill-share.png

## reproduce: fit one load scale to one published figure (adaptive, chatdoc,
## no prefix caching) and predict the other published figures with it
## (issue 10, deliverable 9), regenerating docs/reproduction.md.
reproduce: build
	command -v jq >/dev/null || (apt-get update && apt-get install -y jq)
	campaigns/reproduce.sh out/reproduce
	cp out/reproduce/reproduction.md docs/reproduction.md

## burstiness: issue 10's burstiness figures (adaptive against the best static
## split, by token count and placed as adaptive places (/alg1), with the
## hybrid fleets and aggregated serving beside them, on every built-in
## trace and the Azure traces, arrival CV 1-4 and batches, five held-out
## seeds each), without the bound's columns: the table docs/controllers.md
## quotes is `campaigns/burstiness.py --bound` (about 90 minutes on two
## cores), whose bound also changes the "up to where every arm fails"
## reversal counts. BOUND=1 adds the bound's table on demo alone.
burstiness: build
	command -v python3 >/dev/null || (apt-get update && apt-get install -y python3)
	campaigns/burstiness.py
	if [ -n "$(BOUND)" ]; then campaigns/burstiness.py --bound --traces demo; fi

## demo: the reference demo sweep (13 arms x 8 rates on 8 instances) and its table.
demo: build
	./$(BIN) sim --trace demo --arms $(DEMOARMS) --rates $(DEMORATES)

## demo-live: the live half on one machine without a GPU: stub engines, the
## router (adaptive) and an open-loop replay of a 20 s trace, with the same
## table as sim plus the client-side latencies (about 30 s).
demo-live: build
	./$(BIN) live --fleet demo --stub --trace cmd/narwhal-bench/testdata/live-short.yaml --arm adaptive --rate 1x

## deps: the independent Parquet reader the tests use (DuckDB, from npm).
deps: node_modules/.package-lock.json

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

## test: everything CI checks: formatting, vet, the import rule, unit and
## property tests, race detector on the concurrent packages (and on the
## simulator's one concurrent piece, the live router's rehearsal replays run
## at once). A package may
## take 30 minutes, not go test's default 10: on a loaded 2-core machine the
## race-detected sweep package alone has passed 10 (alone it takes a few).
test: deps fmtcheck vet
	$(GO) test -count=1 -timeout 30m $(PKGS)
	$(GO) test -count=1 -timeout 30m -race ./sweep/ ./cmd/... ./journal/ ./live/...
	$(GO) test -count=1 -timeout 30m -race -run 'TestParallelRehearsalMatchesSerial' ./sim/

vet:
	$(GO) vet $(PKGS)

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## lint: vet plus formatting (the same checks make test starts with).
lint: fmtcheck vet

## bench: hot-path benchmarks (simulator, trace generation, a streamed
## 1M-request adaptive run on eval8, the demo sweep as a whole narwhal-sim
## process, journal appends (throughput, and each append's latency while
## another goroutine flushes) and export, report)
## and the production-scale ones (adaptive on 8 to 4,096 instances, the
## day-long trace on eval8, steady on fleet512 and fleet1024, the oracle's
## search on eval8 and on fleet512; NWB_ORACLE_REQUESTS=1000000 for the
## issue-12 oracle figure); the 1M-request ones take a minute.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./sim/ ./traces/ ./sweep/
	$(GO) test -run '^$$' -bench DemoSweepProcess -benchtime 30x ./cmd/narwhal-sim/
	$(GO) test -run '^$$' -bench Append -benchtime 2000000x ./journal/
	$(GO) test -run '^$$' -bench RecordLatency -benchtime 200000x ./journal/
	$(GO) test -run '^$$' -bench Export1M -benchtime 1x ./journal/
	$(GO) test -run '^$$' -bench Report1M -benchtime 2x ./report/

## bench-scale: the scale figure of issue 12, whole process: 10,000,000
## requests through eval8's adaptive arm (bench/steady-10m.yaml), wall time
## and peak RSS from /usr/bin/time -v (about 30 s). The 100M-request run
## (bench/steady-100m.yaml on bench/eval64.yaml, several minutes) is
## `make bench-scale SCALE=100m`.
SCALE ?= 10m
bench-scale: build
	@if [ "$(SCALE)" = 100m ]; then fl="--fleet bench/eval64.yaml"; fi; \
	/usr/bin/time -v ./$(BIN) sim --trace bench/steady-$(SCALE).yaml $$fl --arms adaptive --workers 1 \
		2>&1 | grep -E 'adaptive|Elapsed|Maximum resident|User time|System time'

## bench-vs-python: issue 12's side-by-side figure. Times the Python
## reference's demo sweep (python3 demo/run_demo.py in NARWHAL_REF, a checkout
## of athrael-soju/Narwhal) and the same nine-arm, eight-rate sweep here as a
## whole process (GO_RUNS=20 runs each of narwhal-sim and narwhal-bench sim),
## back to back on this machine, and prints both tables and the wall and CPU
## ratios (about a minute).
bench-vs-python: build
	@NARWHAL_REF="$(NARWHAL_REF)" bench/vs-python.sh

## bench-router: the live router's overhead (added TTFT via the router over
## direct requests to a zero-cost stub, at 1, 64 and 1,000 streams; router CPU
## per 1,000 requests; RSS), two-leg throughput, and the router's CPU per
## streamed token against a plain reverse proxy, one line each.
bench-router:
	$(GO) test -run '^$$' -bench 'RouterOverhead|RouterThroughput|RouterPerToken' -benchtime 1x ./live/ | grep '^Benchmark'

## soak: the router soak for 30 minutes (make test runs it for 60 s in CI):
## goroutines back to baseline, RSS growth under 10% (docs/operations.md).
SOAK ?= 30m
soak:
	NWB_SOAK=$(SOAK) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 0 ./live/ | grep -E 'soak|PASS|FAIL|ok'

## fuzz: run each fuzz target for a while (FUZZTIME=30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./traces/
	$(GO) test -run '^$$' -fuzz '^FuzzGenerate$$' -fuzztime $(FUZZTIME) ./traces/
	$(GO) test -run '^$$' -fuzz '^FuzzMooncake$$' -fuzztime $(FUZZTIME) ./traces/
	$(GO) test -run '^$$' -fuzz '^FuzzAzure$$' -fuzztime $(FUZZTIME) ./traces/
	$(GO) test -run '^$$' -fuzz '^FuzzStreamFromFile$$' -fuzztime $(FUZZTIME) ./traces/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./fleet/
	$(GO) test -run '^$$' -fuzz '^FuzzParseExperiment$$' -fuzztime $(FUZZTIME) ./sweep/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRates$$' -fuzztime $(FUZZTIME) ./sweep/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSeeds$$' -fuzztime $(FUZZTIME) ./sweep/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./sweep/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzReadExport$$' -fuzztime $(FUZZTIME) ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEnd$$' -fuzztime $(FUZZTIME) ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzManifest$$' -fuzztime $(FUZZTIME) ./journal/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzReadChunk$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzReadChunkSame$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzValidJSON$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzParseError$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzReadEvent$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzHandoff$$' -fuzztime $(FUZZTIME) ./live/api/
	$(GO) test -run '^$$' -fuzz '^FuzzLoadTenants$$' -fuzztime $(FUZZTIME) ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzStartTime$$' -fuzztime $(FUZZTIME) ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzUsage$$' -fuzztime $(FUZZTIME) ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzScheduled$$' -fuzztime $(FUZZTIME) ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzIdentify$$' -fuzztime $(FUZZTIME) ./live/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeDoc$$' -fuzztime $(FUZZTIME) ./live/ha/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRunMeta$$' -fuzztime $(FUZZTIME) ./event/
	$(GO) test -run '^$$' -fuzz '^FuzzNewController$$' -fuzztime $(FUZZTIME) ./core/

clean:
	rm -rf bin
