package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
)

// The dashboard is plain HTML, CSS and JavaScript embedded in the binary: no build step, no
// network, no framework. Its JSON API is a thin bridge to the producer and admin services:
// each call names an RPC, carries its request as protobuf JSON and gets its response back as
// protobuf JSON, so the page sees exactly what the CLI sees.

//go:embed assets
var assets embed.FS

// rpc is one service method the dashboard may call.
type rpc struct {
	full   string
	write  bool // changes state: POST only, admin only, CSRF-checked
	newReq func() proto.Message
	newRes func() proto.Message
}

func call[Req, Res any, PReq interface {
	*Req
	proto.Message
}, PRes interface {
	*Res
	proto.Message
}](full string, write bool) rpc {
	return rpc{full: full, write: write,
		newReq: func() proto.Message { return PReq(new(Req)) },
		newRes: func() proto.Message { return PRes(new(Res)) }}
}

// rpcs are the calls the dashboard makes, by method name.
var rpcs = map[string]rpc{
	"GetJob":                call[jobwirev1.GetJobRequest, jobwirev1.GetJobResponse](jobwirev1.ProducerService_GetJob_FullMethodName, false),
	"CancelJob":             call[jobwirev1.CancelJobRequest, jobwirev1.CancelJobResponse](jobwirev1.ProducerService_CancelJob_FullMethodName, true),
	"CancelGraph":           call[jobwirev1.CancelGraphRequest, jobwirev1.CancelGraphResponse](jobwirev1.ProducerService_CancelGraph_FullMethodName, true),
	"ListJobs":              call[jobwirev1.ListJobsRequest, jobwirev1.ListJobsResponse](jobwirev1.AdminService_ListJobs_FullMethodName, false),
	"ListDeadJobs":          call[jobwirev1.ListDeadJobsRequest, jobwirev1.ListDeadJobsResponse](jobwirev1.AdminService_ListDeadJobs_FullMethodName, false),
	"TopDeadErrors":         call[jobwirev1.TopDeadErrorsRequest, jobwirev1.TopDeadErrorsResponse](jobwirev1.AdminService_TopDeadErrors_FullMethodName, false),
	"RequeueDeadJobs":       call[jobwirev1.RequeueDeadJobsRequest, jobwirev1.RequeueDeadJobsResponse](jobwirev1.AdminService_RequeueDeadJobs_FullMethodName, true),
	"PurgeDeadJobs":         call[jobwirev1.PurgeDeadJobsRequest, jobwirev1.PurgeDeadJobsResponse](jobwirev1.AdminService_PurgeDeadJobs_FullMethodName, true),
	"ListQueues":            call[jobwirev1.ListQueuesRequest, jobwirev1.ListQueuesResponse](jobwirev1.AdminService_ListQueues_FullMethodName, false),
	"PauseQueue":            call[jobwirev1.PauseQueueRequest, jobwirev1.PauseQueueResponse](jobwirev1.AdminService_PauseQueue_FullMethodName, true),
	"ResumeQueue":           call[jobwirev1.ResumeQueueRequest, jobwirev1.ResumeQueueResponse](jobwirev1.AdminService_ResumeQueue_FullMethodName, true),
	"SetQueueLimit":         call[jobwirev1.SetQueueLimitRequest, jobwirev1.SetQueueLimitResponse](jobwirev1.AdminService_SetQueueLimit_FullMethodName, true),
	"GetStats":              call[jobwirev1.GetStatsRequest, jobwirev1.GetStatsResponse](jobwirev1.AdminService_GetStats_FullMethodName, false),
	"ListBreakers":          call[jobwirev1.ListBreakersRequest, jobwirev1.ListBreakersResponse](jobwirev1.AdminService_ListBreakers_FullMethodName, false),
	"ResetBreaker":          call[jobwirev1.ResetBreakerRequest, jobwirev1.ResetBreakerResponse](jobwirev1.AdminService_ResetBreaker_FullMethodName, true),
	"ForceBreaker":          call[jobwirev1.ForceBreakerRequest, jobwirev1.ForceBreakerResponse](jobwirev1.AdminService_ForceBreaker_FullMethodName, true),
	"ListWorkers":           call[jobwirev1.ListWorkersRequest, jobwirev1.ListWorkersResponse](jobwirev1.AdminService_ListWorkers_FullMethodName, false),
	"ListBrokers":           call[jobwirev1.ListBrokersRequest, jobwirev1.ListBrokersResponse](jobwirev1.AdminService_ListBrokers_FullMethodName, false),
	"ListAuditEvents":       call[jobwirev1.ListAuditEventsRequest, jobwirev1.ListAuditEventsResponse](jobwirev1.AdminService_ListAuditEvents_FullMethodName, false),
	"RunJobNow":             call[jobwirev1.RunJobNowRequest, jobwirev1.RunJobNowResponse](jobwirev1.AdminService_RunJobNow_FullMethodName, true),
	"RetryJobNow":           call[jobwirev1.RetryJobNowRequest, jobwirev1.RetryJobNowResponse](jobwirev1.AdminService_RetryJobNow_FullMethodName, true),
	"DeleteJob":             call[jobwirev1.DeleteJobRequest, jobwirev1.DeleteJobResponse](jobwirev1.AdminService_DeleteJob_FullMethodName, true),
	"SetJobPriority":        call[jobwirev1.SetJobPriorityRequest, jobwirev1.SetJobPriorityResponse](jobwirev1.AdminService_SetJobPriority_FullMethodName, true),
	"ListSchedules":         call[jobwirev1.ListSchedulesRequest, jobwirev1.ListSchedulesResponse](jobwirev1.AdminService_ListSchedules_FullMethodName, false),
	"PauseSchedule":         call[jobwirev1.PauseScheduleRequest, jobwirev1.PauseScheduleResponse](jobwirev1.AdminService_PauseSchedule_FullMethodName, true),
	"ResumeSchedule":        call[jobwirev1.ResumeScheduleRequest, jobwirev1.ResumeScheduleResponse](jobwirev1.AdminService_ResumeSchedule_FullMethodName, true),
	"TriggerSchedule":       call[jobwirev1.TriggerScheduleRequest, jobwirev1.TriggerScheduleResponse](jobwirev1.AdminService_TriggerSchedule_FullMethodName, true),
	"ListConcurrencyRules":  call[jobwirev1.ListConcurrencyRulesRequest, jobwirev1.ListConcurrencyRulesResponse](jobwirev1.AdminService_ListConcurrencyRules_FullMethodName, false),
	"SetConcurrencyRule":    call[jobwirev1.SetConcurrencyRuleRequest, jobwirev1.SetConcurrencyRuleResponse](jobwirev1.AdminService_SetConcurrencyRule_FullMethodName, true),
	"RemoveConcurrencyRule": call[jobwirev1.RemoveConcurrencyRuleRequest, jobwirev1.RemoveConcurrencyRuleResponse](jobwirev1.AdminService_RemoveConcurrencyRule_FullMethodName, true),
	"ListBatches":           call[jobwirev1.ListBatchesRequest, jobwirev1.ListBatchesResponse](jobwirev1.AdminService_ListBatches_FullMethodName, false),
	"GetBatch":              call[jobwirev1.GetBatchRequest, jobwirev1.GetBatchResponse](jobwirev1.AdminService_GetBatch_FullMethodName, false),
	"ListRateLimits":        call[jobwirev1.ListRateLimitsRequest, jobwirev1.ListRateLimitsResponse](jobwirev1.AdminService_ListRateLimits_FullMethodName, false),
	"SetRateLimit":          call[jobwirev1.SetRateLimitRequest, jobwirev1.SetRateLimitResponse](jobwirev1.AdminService_SetRateLimit_FullMethodName, true),
	"RemoveRateLimit":       call[jobwirev1.RemoveRateLimitRequest, jobwirev1.RemoveRateLimitResponse](jobwirev1.AdminService_RemoveRateLimit_FullMethodName, true),
}

// maxRequestBody bounds a dashboard request (a requeue with an edited payload is the largest).
const maxRequestBody = 4 << 20

type dashboard struct {
	conn  grpc.ClientConnInterface
	authn *authn
	rates *sampler
}

func newDashboard(opts Options, a *authn) *dashboard {
	d := &dashboard{conn: opts.Conn, authn: a}
	d.rates = newSampler(opts.Context, opts.Clock, opts.SampleEvery, d.stats)
	d.rates.start()
	return d
}

func (d *dashboard) routes(mux *http.ServeMux) {
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	csrf := http.NewCrossOriginProtection()
	page := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d.authn.roleFor(r) == RoleNone {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			http.ServeFileFS(w, r, static, name)
		})
	}
	mux.Handle("GET /{$}", secure(page("index.html")))
	mux.Handle("GET /login", secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "login.html")
	})))
	mux.Handle("POST /login", secure(csrf.Handler(http.HandlerFunc(d.login))))
	mux.Handle("POST /logout", secure(csrf.Handler(http.HandlerFunc(d.logout))))
	mux.Handle("GET /assets/", secure(http.StripPrefix("/assets/", files)))
	mux.Handle("GET /api/me", secure(d.authn.require(RoleViewer, http.HandlerFunc(d.me))))
	mux.Handle("GET /api/throughput", secure(d.authn.require(RoleViewer, http.HandlerFunc(d.throughput))))
	mux.Handle("GET /api/rpc/{method}", secure(d.authn.require(RoleViewer, http.HandlerFunc(d.read))))
	mux.Handle("POST /api/rpc/{method}", secure(csrf.Handler(d.authn.require(RoleAdmin, http.HandlerFunc(d.write)))))
}

// secure adds the headers every dashboard answer carries: no framing, scripts only from this
// origin (the page has no inline script), no content sniffing.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// login swaps a token typed into the login form for an HttpOnly, SameSite=Strict cookie.
func (d *dashboard) login(w http.ResponseWriter, r *http.Request) {
	if d.authn.auth == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	role, err := d.authn.auth.Authenticate(withClient(r), tok)
	var throttled *auth.ThrottledError
	if errors.As(err, &throttled) {
		tooMany(w, throttled.RetryAfter)
		return
	}
	if tok == "" || err != nil || role < RoleViewer {
		http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (d *dashboard) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

func (d *dashboard) me(w http.ResponseWriter, r *http.Request) {
	role := roleOf(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"role": role.String(), "auth": d.authn.auth != nil})
}

func (d *dashboard) throughput(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"samples": d.rates.snapshot(), "every_seconds": d.rates.every.Seconds(),
		"window_seconds": rateWindow.Seconds()})
}

// read answers GET /api/rpc/{method}?req=JSON.
func (d *dashboard) read(w http.ResponseWriter, r *http.Request) {
	m, ok := rpcs[r.PathValue("method")]
	if !ok || m.write {
		writeError(w, http.StatusNotFound, "no such read call")
		return
	}
	d.invoke(w, r, m, []byte(r.URL.Query().Get("req")))
}

// write answers POST /api/rpc/{method} with the request as the JSON body.
func (d *dashboard) write(w http.ResponseWriter, r *http.Request) {
	m, ok := rpcs[r.PathValue("method")]
	if !ok || !m.write {
		writeError(w, http.StatusNotFound, "no such write call")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	d.invoke(w, r, m, body)
}

func (d *dashboard) invoke(w http.ResponseWriter, r *http.Request, m rpc, body []byte) {
	req := m.newReq()
	if len(body) > 0 {
		if err := (protojson.UnmarshalOptions{}).Unmarshal(body, req); err != nil {
			writeError(w, http.StatusBadRequest, "request is not valid: "+err.Error())
			return
		}
	}
	res := m.newRes()
	if err := d.conn.Invoke(d.callContext(r), m.full, req, res); err != nil {
		st := status.Convert(err)
		writeError(w, httpStatus(st.Code()), st.Message())
		return
	}
	out, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(res)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// callContext passes the caller's token to the service as a gRPC call would carry it, so the
// broker's own authorisation applies to dashboard calls too.
func (d *dashboard) callContext(r *http.Request) context.Context {
	// The audit trail names the browser's address as the caller's.
	ctx := peer.NewContext(r.Context(), &peer.Peer{Addr: httpAddr(r.RemoteAddr)})
	if t := token(r); t != "" && d.authn.auth != nil {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+t))
	}
	return ctx
}

// stats reads the totals the throughput graph is drawn from, as GetStats reports them: the
// counts and the last minute only, which is all the graph draws. The whole of GetStats, read
// every 2 s, was seven reads of the store in a burst, and counted the last five minutes'
// finished jobs each time. On PostgreSQL at 1,000 jobs/s the bursts showed in the tail of
// enqueue to start: p99 5.6-11.8 ms, against 4.0-7.1 with no sampler (4 interleaved runs each).
func (d *dashboard) stats(ctx context.Context) (*jobwirev1.GetStatsResponse, error) {
	res := &jobwirev1.GetStatsResponse{}
	err := d.conn.Invoke(ctx, jobwirev1.AdminService_GetStats_FullMethodName, &jobwirev1.GetStatsRequest{CountsOnly: true}, res)
	return res, err
}

func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// sampleKeep is how many throughput samples are kept: five minutes at the default rate.
const sampleKeep = 150

// sample is one reading of the job totals.
type sample struct {
	At        time.Time `json:"at"`
	Enqueued  int64     `json:"enqueued"`  // every job the broker holds or has finished
	Succeeded int64     `json:"succeeded"` // jobs SUCCEEDED
	Dead      int64     `json:"dead"`      // jobs DEAD
	// SucceededLastMinute and FailedLastMinute count attempts that succeeded and failed in the
	// minute before At.
	SucceededLastMinute int64 `json:"succeeded_last_minute"`
	FailedLastMinute    int64 `json:"failed_last_minute"`
	// The graph's lines: per second, each averaged over the minute before At (sample.rates).
	EnqueuedRate  float64 `json:"enqueued_per_second"`
	SucceededRate float64 `json:"succeeded_per_second"`
	FailedRate    float64 `json:"failed_per_second"`
}

// httpAddr is an HTTP client's address as a net.Addr.
type httpAddr string

func (a httpAddr) Network() string { return "tcp" }
func (a httpAddr) String() string  { return string(a) }
