module github.com/redislock/redislock/examples

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/ncruces/go-sqlite3 v0.37.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redislock/redislock v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/ncruces/go-sqlite3-wasm/v6 v6.5.35401 // indirect
	github.com/ncruces/julianday v1.0.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
