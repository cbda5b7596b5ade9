module github.com/narwhal-bench/narwhal-bench

go 1.26.8

require (
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/urfave/cli/v3 v3.14.0 // indirect
)
