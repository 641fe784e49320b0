package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
	_ "modernc.org/sqlite" // the driver the SQLite store uses

	"github.com/jobwire/jobwire/internal/percentile"
	"github.com/jobwire/jobwire/server"
)

// floorCommand measures what a lone job cannot cost less than on this machine, with none of
// the broker's code in the way: a round trip between two processes on loopback, over plain TCP
// (a protocol with no framing of its own, as Redis') and over gRPC with the broker's
// flow-control windows (a unary call, and a message each way on a stream kept open, as the Go
// client's enqueue streams send), and the commit of a transaction that inserts one row into a
// table of one index, on SQLite (a fresh file at the benchmark's durability, through the
// store's driver) and, with --db, on PostgreSQL. A lone producer waits for one round trip and
// one commit per job, so their sum bounds its rate from above; the breakdown and the
// one-producer scenarios say how far the broker is from it.
const floorCommand = "floor"

// floorServerCommand is the hidden subcommand that runs the other end of floorCommand's round
// trips: it echoes what it is sent over gRPC and over plain TCP, and prints the two addresses
// on stdout.
const floorServerCommand = "floor-server"

// floorPayload is the size of each echoed message: about an Enqueue of a small job.
const floorPayload = 64

// floorService echoes a BytesValue, in a unary call (Echo) and on a stream (Stream). It is
// registered by hand: it exists for this measurement only.
var floorService = grpc.ServiceDesc{
	ServiceName: "jobwire.bench.Floor",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				in := new(wrapperspb.BytesValue)
				if err := stream.RecvMsg(in); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := stream.SendMsg(in); err != nil {
					return err
				}
			}
		},
	}},
}

// runFloorServer serves floorService on a free loopback port, and echoes every floorPayload
// bytes read on another, until its stdin closes (the measuring process ended) or ctx is done.
func runFloorServer(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer tcp.Close()
	go echoTCP(tcp)
	srv := grpc.NewServer(grpc.InitialWindowSize(server.StreamWindow), grpc.InitialConnWindowSize(server.ConnWindow))
	srv.RegisterService(&floorService, struct{}{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		srv.Stop()
	}()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	fmt.Println(ln.Addr().String(), tcp.Addr().String())
	return srv.Serve(ln)
}

// echoTCP writes back each floorPayload bytes read, on every connection ln accepts: the round
// trip of a protocol with no framing of its own, as a Redis client's command and reply.
func echoTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, floorPayload)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// floorRow is one measured floor: its samples, sorted.
type floorRow struct {
	what string
	// commitOf names the store whose lone job waits for this commit ("" for a round trip, or
	// a statement the store's writer does not send that way).
	commitOf string
	samples  []time.Duration
}

func (r floorRow) p(q float64) time.Duration { return percentile.NearestRank(r.samples, q) }

// timeEach runs f warm times unmeasured, then n times measured, and returns the sorted times.
func timeEach(n, warm int, f func() error) ([]time.Duration, error) {
	for range warm {
		if err := f(); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		out[i] = time.Since(start)
	}
	slices.Sort(out)
	return out, nil
}

func runFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(floorCommand, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: jobwire-bench %s [-n N] [--durability normal|full] [--db postgres://...]\n\n", floorCommand)
		fmt.Fprintln(fs.Output(), "Measures what a lone job cannot cost less than here: a round trip between two processes on\n"+
			"loopback (TCP, gRPC), and the commit of a one-row transaction on SQLite and, with --db, PostgreSQL.\n\nFlags:")
		fs.PrintDefaults()
	}
	n := fs.Int("n", 3000, "measured samples of each floor (after a tenth as many unmeasured)")
	durability := fs.String("durability", "normal", "SQLite durability: normal (synchronous=NORMAL) or full (synchronous=FULL)")
	pg := fs.String("db", "", "also measure this PostgreSQL database (a postgres:// URL), in a schema of its own, dropped after")
	if err := parseCommandLine(fs, args); err != nil {
		return err
	}
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "jobwire-bench floor: -n must be at least 1")
		return errUsage
	}
	if *durability != "normal" && *durability != "full" {
		fmt.Fprintf(os.Stderr, "jobwire-bench floor: --durability must be normal or full, not %q\n", *durability)
		return errUsage
	}
	env := machineInfo() // the load average as the run starts
	rows, err := measureFloors(ctx, *n, *durability, *pg)
	if err != nil {
		return err
	}
	fmt.Printf("jobwire-bench %s: %s, %d CPUs, %s, load average %s; %d samples each\n\n",
		floorCommand, env.CPU, env.CPUs, env.Go, env.LoadAvg, *n)
	printFloors(os.Stdout, rows)
	return nil
}

// Names of the floors.
const (
	floorTCP     = "TCP round trip, two processes"
	floorUnary   = "gRPC unary call, two processes"
	floorStream  = "gRPC message each way, open stream"
	floorSQLite  = "SQLite commit of one row"
	floorPGPing  = "PostgreSQL SELECT 1"
	floorPGAuto  = "PostgreSQL insert of one row, autocommit"
	floorPGBatch = "PostgreSQL BEGIN, insert, COMMIT in one batch"
)

// measureFloors measures every floor, n samples each: gRPC, SQLite at durability, and
// PostgreSQL when pg is not empty.
func measureFloors(ctx context.Context, n int, durability, pg string) ([]floorRow, error) {
	warm := max(n/10, 1)
	rows, err := roundTripFloors(ctx, n, warm)
	if err != nil {
		return nil, fmt.Errorf("round trips: %w", err)
	}
	dir, err := os.MkdirTemp("", "jobwire-floor-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	commit, err := sqliteFloor(ctx, filepath.Join(dir, "floor.db"), durability, n, warm)
	if err != nil {
		return nil, fmt.Errorf("SQLite: %w", err)
	}
	rows = append(rows, floorRow{what: floorSQLite + " (" + durability + ")", commitOf: "SQLite", samples: commit})
	if pg != "" {
		pgRows, err := postgresFloors(ctx, pg, n, warm)
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
		rows = append(rows, pgRows...)
	}
	return rows, nil
}

// roundTripFloors times a plain TCP echo, the unary call and the stream message against a floor
// server in a process of its own (this program run again).
func roundTripFloors(ctx context.Context, n, warm int) ([]floorRow, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, floorServerCommand)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = stdin.Close() // the server stops when its stdin closes
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addrs := strings.Fields(line)
	if err != nil || len(addrs) != 2 {
		return nil, fmt.Errorf("the floor server's addresses: %q, %v", line, err)
	}
	tcp, err := net.Dial("tcp", addrs[1])
	if err != nil {
		return nil, err
	}
	defer tcp.Close()
	buf := make([]byte, floorPayload)
	raw, err := timeEach(n, warm, func() error {
		if _, err := tcp.Write(buf); err != nil {
			return err
		}
		_, err := io.ReadFull(tcp, buf)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The broker's and the Go client's fixed flow-control windows, which spare a probe of the
	// bandwidth-delay product for each burst of data read (server.Transport).
	conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(server.StreamWindow), grpc.WithInitialConnWindowSize(server.ConnWindow))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	msg := wrapperspb.Bytes(make([]byte, floorPayload))
	unary, err := timeEach(n, warm, func() error {
		return conn.Invoke(ctx, "/jobwire.bench.Floor/Echo", msg, new(wrapperspb.BytesValue))
	})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := conn.NewStream(sctx, &floorService.Streams[0], "/jobwire.bench.Floor/Stream")
	if err != nil {
		return nil, err
	}
	streamed, err := timeEach(n, warm, func() error {
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		return stream.RecvMsg(new(wrapperspb.BytesValue))
	})
	if err != nil {
		return nil, err
	}
	return []floorRow{{what: floorTCP, samples: raw}, {what: floorUnary, samples: unary}, {what: floorStream, samples: streamed}}, nil
}

// sqliteFloor times BEGIN IMMEDIATE, the insert of one row and COMMIT, each prepared on one
// connection, as the store's writer runs them, in a fresh database in WAL mode at durability.
func sqliteFloor(ctx context.Context, path, durability string, n, warm int) ([]time.Duration, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+durability+")")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE floor (id INTEGER PRIMARY KEY, payload BLOB NOT NULL, created_at INTEGER NOT NULL);
		CREATE INDEX floor_created ON floor (created_at, id)`); err != nil {
		return nil, err
	}
	var stmts [3]*sql.Stmt
	for i, q := range []string{"BEGIN IMMEDIATE", "INSERT INTO floor (payload, created_at) VALUES (?, ?)", "COMMIT"} {
		if stmts[i], err = conn.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		defer stmts[i].Close()
	}
	payload := make([]byte, floorPayload)
	return timeEach(n, warm, func() error {
		if _, err := stmts[0].ExecContext(ctx); err != nil {
			return err
		}
		if _, err := stmts[1].ExecContext(ctx, payload, time.Now().UnixNano()); err != nil {
			return err
		}
		_, err := stmts[2].ExecContext(ctx)
		return err
	})
}

// postgresFloors times, on one connection in a fresh schema, a round trip that touches no
// table (SELECT 1), the insert of one row committed on its own, and the same insert between
// BEGIN and COMMIT sent as one batch, as the store's writer sends a transaction.
func postgresFloors(ctx context.Context, url string, n, warm int) (rows []floorRow, err error) {
	db, schema, err := freshSchema(ctx, url, floorCommand)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := dropSchema(url, schema); err == nil {
			err = derr
		}
	}()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE floor (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		payload bytea NOT NULL, created_at bigint NOT NULL)`); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX floor_created ON floor (created_at, id)`); err != nil {
		return nil, err
	}
	const insert = `INSERT INTO floor (payload, created_at) VALUES ($1, $2)`
	payload := make([]byte, floorPayload)
	ping, err := timeEach(n, warm, func() error {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		return nil, err
	}
	auto, err := timeEach(n, warm, func() error {
		_, err := conn.Exec(ctx, insert, payload, time.Now().UnixNano())
		return err
	})
	if err != nil {
		return nil, err
	}
	batch, err := timeEach(n, warm, func() error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(insert, payload, time.Now().UnixNano())
		b.Queue("COMMIT")
		return conn.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, err
	}
	return []floorRow{{what: floorPGPing, samples: ping}, {what: floorPGAuto, samples: auto},
		{what: floorPGBatch, commitOf: "PostgreSQL", samples: batch}}, nil
}

// printFloors prints each floor's p50 and p99 and, for each store, the floor of a lone
// producer's job: a message each way on its stream and one commit.
func printFloors(w io.Writer, rows []floorRow) {
	fmt.Fprintf(w, "%-52s %8s %8s\n", "FLOOR", "P50 US", "P99 US")
	var stream *floorRow
	for i, r := range rows {
		fmt.Fprintf(w, "%-52s %8.0f %8.0f\n", r.what, micros(r.p(50)), micros(r.p(99)))
		if r.what == floorStream {
			stream = &rows[i]
		}
	}
	if stream == nil {
		return
	}
	fmt.Fprintln(w, "\nA lone producer's job, at the median: one message each way on its stream and one commit")
	for _, r := range rows {
		if r.commitOf == "" {
			continue
		}
		sum := stream.p(50) + r.p(50)
		fmt.Fprintf(w, "  %-11s %6.0f us: at most %6.0f jobs/s from one producer\n", r.commitOf, micros(sum), float64(time.Second)/float64(sum))
	}
}

// micros is d in microseconds, the unit of the floor's and the breakdown's tables.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
