module github.com/jobwire/jobwire/bench/openloop

go 1.26.0
