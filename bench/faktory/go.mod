module github.com/jobwire/jobwire/bench/faktory

go 1.26.0

require (
	github.com/contribsys/faktory v1.9.3
	github.com/contribsys/faktory_worker_go v1.7.0
)

require (
	github.com/BurntSushi/toml v1.5.0 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/justinas/nosurf v1.2.0 // indirect
	github.com/redis/go-redis/v9 v9.7.3 // indirect
)

tool github.com/contribsys/faktory/cmd/faktory

require github.com/jobwire/jobwire/bench/openloop v0.0.0

replace github.com/jobwire/jobwire/bench/openloop => ../openloop
