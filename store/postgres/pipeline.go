package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipeTx is a write transaction that saves round trips to the server. The statements whose
// answer nobody waits for (BEGIN, savepoints, the write receipt, finished totals, a new
// queue's row) are held and sent, in order, in one pgx batch with the next statement that is
// waited for, or with COMMIT. So is a statement whose answer is wanted only once the
// transaction is over (later: a dispatch round's lease), read as its batch is. A group commit
// that leases, finishes and inserts jobs thus costs a round trip per statement that returns
// something the transaction goes on with, not one per statement. A held statement that fails
// fails the statement it was sent with: the transaction is aborted either way, and the error
// is the server's own, so Classify reads it as before.
//
// It is a pgx.Tx, so code written against one (and savepoints through Begin) works unchanged;
// LargeObjects is the exception: the store keeps no large objects.
type pipeTx struct {
	*pipe
	savepoint int // 0: the transaction itself; n: the savepoint sp_n (Begin)
	closed    bool
}

// pipe is the state a transaction's savepoints share with it.
type pipe struct {
	pc    *pgxpool.Conn
	conn  *pgx.Conn
	held  []heldStmt
	data  int // held statements that change data (not BEGIN or a savepoint's)
	nest  int // savepoints taken
	ended bool
	// back are planner settings turned off (plannerOff) and not yet turned back: that waits
	// for the next statement they could change (restorePlanner).
	back []string
	// safe counts the tx.frontSafe calls under way; unsafe: a statement was sent outside them
	// (note), which may have made a job ready ahead of a front (front.go).
	safe   int
	unsafe bool
}

// note marks the transaction unsafe for the fronts when it runs a statement outside
// tx.frontSafe. Ending a transaction or a savepoint changes no job.
func (p *pipe) note(sql string) {
	if p.safe > 0 || p.unsafe {
		return
	}
	for _, end := range []string{"COMMIT", "ROLLBACK", "RELEASE SAVEPOINT", "SAVEPOINT"} {
		if strings.HasPrefix(sql, end) {
			return
		}
	}
	p.unsafe = true
}

type heldStmt struct {
	sql  string
	args []any
	// read, when set, reads the statement's rows (later) and returns the statement's error.
	read func(pgx.Rows) error
}

var _ pgx.Tx = (*pipeTx)(nil)

// beginPipe takes a pooled connection and holds BEGIN: it is sent with the first statement.
func beginPipe(ctx context.Context, pool *pgxpool.Pool) (*pipeTx, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeTx{pipe: &pipe{pc: pc, conn: pc.Conn(), held: []heldStmt{{sql: "BEGIN"}}}}, nil
}

// hold queues a statement whose only answer is success or failure, to be sent with the next
// one that is waited for.
func (p *pipe) hold(sql string, args ...any) {
	p.note(sql)
	p.restorePlanner(sql)
	p.held = append(p.held, heldStmt{sql: sql, args: args})
	p.data++
}

// holdControl queues a statement that changes no data: a savepoint's.
func (p *pipe) holdControl(sql string) {
	p.restorePlanner(sql)
	p.held = append(p.held, heldStmt{sql: sql})
}

// plannerOff turns names off for the statements that follow (on), or marks them to be turned
// back (off) before the next statement they could change. Turning off a setting still
// waiting to be turned back costs nothing: it was never turned back. One that is waiting and
// not asked for again is turned back first.
func (p *pipe) plannerOff(on bool, names []string) {
	if !on {
		for _, n := range names {
			if !slices.Contains(p.back, n) {
				p.back = append(p.back, n)
			}
		}
		return
	}
	var back, off []string
	for _, n := range p.back {
		if !slices.Contains(names, n) {
			back = append(back, n)
		}
	}
	for _, n := range names {
		if !slices.Contains(p.back, n) {
			off = append(off, n)
		}
	}
	p.back = nil
	if len(back) > 0 {
		p.held = append(p.held, heldStmt{sql: plannerSQL(false, back)})
	}
	if len(off) > 0 {
		p.held = append(p.held, heldStmt{sql: plannerSQL(true, off)})
	}
}

// restorePlanner holds the statement that turns back the settings waiting for it, unless sql
// is one they cannot change (plannerNeutral). COMMIT never needs it: the settings end with
// the transaction.
func (p *pipe) restorePlanner(sql string) {
	if len(p.back) == 0 || plannerNeutral[sql] {
		return
	}
	back := p.back
	p.back = nil
	p.held = append(p.held, heldStmt{sql: plannerSQL(false, back)})
}

// later holds a statement whose rows read gets when its batch is sent: with the next statement
// that is waited for, or with COMMIT. read must close the rows, and return the statement's own
// error only (statementFailed): any other error returned would fail a batch whose COMMIT may
// already have gone through.
func (p *pipe) later(sql string, args []any, read func(pgx.Rows) error) {
	p.note(sql)
	p.restorePlanner(sql)
	p.held = append(p.held, heldStmt{sql: sql, args: args, read: read})
	p.data++
}

// statementFailed reports whether err, from reading a later statement's rows, is the
// statement's own (the server's, or the connection's): the batch, COMMIT included, failed with
// it. Any other error is the reader's, after the server ran the whole batch.
func (p *pipe) statementFailed(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && (errors.As(err, &pgErr) || p.conn.IsClosed())
}

// runRows runs sql and hands what read makes of its rows (read closes them) to got: at once,
// or, when later and tx is a pipeTx, with the transaction's next waited statement or COMMIT
// (pipe.later). Run at once, any error is returned. Later, an error of the statement's own
// fails the transaction, and one of reading goes to got alone: COMMIT may have gone through.
func runRows[T any](t *tx, later bool, sql string, args []any, read func(pgx.Rows) (T, error), got func(T, error)) error {
	if pt, piped := t.tx.(*pipeTx); later && piped {
		pt.later(sql, args, func(rows pgx.Rows) error {
			v, err := read(rows)
			if pt.statementFailed(err) {
				return err
			}
			got(v, err)
			return nil
		})
		return nil
	}
	rows, err := t.tx.Query(t.ctx, sql, args...)
	if err != nil {
		return err
	}
	v, err := read(rows)
	if err != nil {
		return err
	}
	got(v, nil)
	return nil
}

// batchOf queues held, then extra, in a new batch.
func batchOf(held []heldStmt, extra ...heldStmt) *pgx.Batch {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(held)+len(extra))}
	for _, h := range append(held, extra...) {
		b.Queue(h.sql, h.args...)
	}
	return b
}

// readHeld reads the results of held, sent at the head of br, in order: the first error is
// that of the statement that failed, after which the server ran none of the batch.
func readHeld(br pgx.BatchResults, held []heldStmt) error {
	for _, h := range held {
		if h.read == nil {
			if _, err := br.Exec(); err != nil {
				return err
			}
			continue
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if err := h.read(rows); err != nil {
			return err
		}
	}
	return nil
}

// send sends the held statements and then sql, as one batch, and returns the results of sql
// to read (the caller closes them); the held statements' errors come first.
func (p *pipe) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if p.ended {
		return nil, pgx.ErrTxClosed
	}
	held := p.take()
	br := p.conn.SendBatch(ctx, batchOf(held, heldStmt{sql: sql, args: args}))
	if err := readHeld(br, held); err != nil {
		_ = br.Close()
		return nil, err
	}
	return br, nil
}

// take empties the held statements and returns them.
func (p *pipe) take() []heldStmt {
	held := p.held
	p.held, p.data = nil, 0
	return held
}

// flush sends what is held now, so that the errors of held statements are known (at the end
// of a savepoint, say).
func (p *pipe) flush(ctx context.Context) error {
	if len(p.held) == 0 {
		return nil
	}
	if p.ended {
		return pgx.ErrTxClosed
	}
	held := p.take()
	br := p.conn.SendBatch(ctx, batchOf(held))
	err := readHeld(br, held)
	return errors.Join(err, br.Close())
}

func (p *pipe) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.note(sql)
	p.restorePlanner(sql)
	if len(p.held) == 0 {
		if p.ended {
			return pgconn.CommandTag{}, pgx.ErrTxClosed
		}
		return p.conn.Exec(ctx, sql, args...)
	}
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	return tag, errors.Join(err, br.Close())
}

func (p *pipe) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	p.note(sql)
	p.restorePlanner(sql)
	if len(p.held) == 0 {
		if p.ended {
			return nil, pgx.ErrTxClosed
		}
		return p.conn.Query(ctx, sql, args...)
	}
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p *pipe) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	return &pipeRow{rows: rows, err: err}
}

func (p *pipe) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		p.note(q.SQL)
	}
	p.restorePlanner("")
	if len(p.held) > 0 {
		held := p.take()
		b.QueuedQueries = append(batchOf(held).QueuedQueries, b.QueuedQueries...)
		return &skipResults{BatchResults: p.conn.SendBatch(ctx, b), held: held}
	}
	return p.conn.SendBatch(ctx, b)
}

func (p *pipe) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	p.note("COPY")
	p.restorePlanner("")
	if err := p.flush(ctx); err != nil {
		return 0, err
	}
	return p.conn.CopyFrom(ctx, table, columns, src)
}

func (p *pipe) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return p.conn.Prepare(ctx, name, sql)
}

// LargeObjects is not supported: the store keeps none.
func (p *pipe) LargeObjects() pgx.LargeObjects {
	panic("postgres: large objects are not supported in a write")
}

func (p *pipe) Conn() *pgx.Conn { return p.conn }

// Begin holds a SAVEPOINT; its Commit and Rollback hold the statements that end it.
func (t *pipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed || t.ended {
		return nil, pgx.ErrTxClosed
	}
	t.nest++
	t.holdControl("SAVEPOINT sp_" + strconv.Itoa(t.nest))
	return &pipeTx{pipe: t.pipe, savepoint: t.nest}, nil
}

// Commit commits the transaction, sending what is held with COMMIT in one batch, and gives
// the connection back to the pool; on a savepoint it holds RELEASE SAVEPOINT.
func (t *pipeTx) Commit(ctx context.Context) error {
	if t.closed || t.ended {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if t.savepoint > 0 {
		t.holdControl("RELEASE SAVEPOINT sp_" + strconv.Itoa(t.savepoint))
		return nil
	}
	t.back = nil // the settings end with the transaction
	tag, err := t.Exec(ctx, "COMMIT")
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		// As pgx does: a transaction that cannot be ended cleanly goes with its connection.
		if t.conn.PgConn().TxStatus() != 'I' {
			_ = t.conn.Close(ctx)
		}
		t.end()
		return err
	}
	t.end()
	return nil
}

// Rollback rolls the transaction back and gives the connection back to the pool; on a
// savepoint it sends ROLLBACK TO SAVEPOINT at once. Held, it would ride with the next
// statement, and pgx prepares a statement it has not seen before sending the batch: in a
// transaction a failed part aborted, that preparation fails.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if t.closed || t.ended {
		return pgx.ErrTxClosed
	}
	t.closed = true
	if t.savepoint > 0 {
		_, err := t.Exec(ctx, "ROLLBACK TO SAVEPOINT sp_"+strconv.Itoa(t.savepoint))
		return err
	}
	t.held, t.data, t.back = nil, 0, nil
	var err error
	if t.conn.PgConn().TxStatus() != 'I' && !t.conn.IsClosed() {
		if _, err = t.conn.Exec(ctx, "ROLLBACK"); err != nil {
			_ = t.conn.Close(ctx)
		}
	}
	t.end()
	return err
}

// end gives the connection back to the pool, which closes it instead when it is still in a
// transaction.
func (p *pipe) end() {
	if !p.ended {
		p.ended = true
		p.pc.Release()
	}
}

// batchRows are the rows of a batch's last statement; closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// pipeRow is QueryRow's answer, read as pgx reads one: no row is pgx.ErrNoRows.
type pipeRow struct {
	rows pgx.Rows
	err  error
}

func (r *pipeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// skipResults hides the results of the held statements sent ahead of a caller's batch.
type skipResults struct {
	pgx.BatchResults
	held []heldStmt // not read yet
	err  error
}

func (s *skipResults) next() error {
	if s.held != nil {
		if err := readHeld(s.BatchResults, s.held); err != nil {
			s.err = fmt.Errorf("a statement sent ahead of the batch: %w", err)
		}
		s.held = nil
	}
	return s.err
}

// Close reads what is held first: a statement sent later must be read even when the batch's
// own results are not.
func (s *skipResults) Close() error {
	return errors.Join(s.next(), s.BatchResults.Close())
}

func (s *skipResults) Exec() (pgconn.CommandTag, error) {
	if err := s.next(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return s.BatchResults.Exec()
}

func (s *skipResults) Query() (pgx.Rows, error) {
	if err := s.next(); err != nil {
		return nil, err
	}
	return s.BatchResults.Query()
}

func (s *skipResults) QueryRow() pgx.Row {
	if err := s.next(); err != nil {
		return &pipeRow{err: err}
	}
	return s.BatchResults.QueryRow()
}
