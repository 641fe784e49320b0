package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

const (
	envAddr        = client.EnvAddr
	defaultAddr    = client.DefaultAddr
	defaultTimeout = 10 * time.Second
)

// commonFlags are the flags every command that talks to the broker takes.
type commonFlags struct {
	addr    string
	timeout time.Duration
	json    bool

	fs      *flag.FlagSet
	envAddr string // the JOBWIRE_ADDR the command started with, "" when unset
	sec     clientSecurity
}

func addCommonFlags(e *env, fs *flag.FlagSet) *commonFlags {
	cf := &commonFlags{fs: fs, envAddr: e.getenv(envAddr)}
	addr := cf.envAddr
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&cf.addr, "addr", addr, "broker address host:port (env "+envAddr+")")
	fs.DurationVar(&cf.timeout, "timeout", defaultTimeout, "how long to wait for the broker's answer")
	fs.BoolVar(&cf.json, "json", false, "print the broker's response as JSON (shape: docs/operating.md)")
	cf.sec.add(e, fs)
	return cf
}

// addrSource names where the address came from, for messages about it.
func (cf *commonFlags) addrSource() string {
	if cf.envAddr != "" && (cf.fs == nil || !flagGiven(cf.fs, "addr")) {
		return envAddr
	}
	return "--addr"
}

func (cf *commonFlags) validate() error {
	if err := checkDialAddr(cf.addr); err != nil {
		return usageErrorf("%s %s", cf.addrSource(), err)
	}
	if cf.timeout <= 0 {
		return usageErrorf("--timeout must be positive, got %s", cf.timeout)
	}
	return nil
}

// checkDialAddr checks that addr is host:port. gRPC would take more (resolver URLs such as
// dns:///host) and read a bare host as port 443, so a forgotten port or a pasted http:// URL
// would fail later with a confusing transport error; the sentence says what to write instead.
func checkDialAddr(addr string) error {
	const example = "write host:port, e.g. " + defaultAddr
	if addr == "" {
		return fmt.Errorf("is empty; %s", example)
	}
	if scheme, rest, ok := strings.Cut(addr, "://"); ok {
		return fmt.Errorf("%q is a URL; drop the %s:// and %s", addr, scheme, "write host:port, e.g. "+hostPortOf(rest))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		if strings.Count(addr, ":") == 0 || (strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]")) {
			return fmt.Errorf("%q has no port; %s", addr, "write host:port, e.g. "+addr+":7070")
		}
		return fmt.Errorf("%q is not host:port; %s (IPv6 in brackets: [::1]:7070)", addr, example)
	}
	if host == "" {
		return fmt.Errorf("%q has no host; %s", addr, "write host:port, e.g. 127.0.0.1"+addr)
	}
	if strings.ContainsAny(host, " /\\?#@") {
		return fmt.Errorf("%q has a host that is not a name or an IP address; %s", addr, example)
	}
	if err := checkPort(port, false); err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	return nil
}

// checkPort checks a port number; zero is allowed only where the system may pick one (a
// listening address).
func checkPort(port string, zeroOK bool) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) {
		lo := 1
		if zeroOK {
			lo = 0
		}
		return fmt.Errorf("port %q is not a number in %d..65535", port, lo)
	}
	return nil
}

// hostPortOf suggests the host:port inside what followed a URL scheme.
func hostPortOf(rest string) string {
	hp, _, _ := strings.Cut(rest, "/")
	if hp == "" {
		return defaultAddr
	}
	if _, _, err := net.SplitHostPort(hp); err != nil {
		return hp + ":7070"
	}
	return hp
}

// parse parses flags that may come before, between or after the positional arguments, so both
// "job get --json 42" and "job get 42 --json" work, and returns the positionals. After "--"
// everything is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{fs: fs}
			}
			return nil, usageErrorf("%s", flagErrorSentence(fs, err))
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, checkUTF8(fs, pos)
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			return pos, checkUTF8(fs, pos)
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkUTF8 refuses arguments and flag values that are not UTF-8: the API's strings must be,
// and gRPC would refuse to send them with a message about marshaling.
func checkUTF8(fs *flag.FlagSet, pos []string) error {
	for _, p := range pos {
		if !utf8.ValidString(p) {
			return usageErrorf("argument %q is not valid UTF-8", p)
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if v := f.Value.String(); err == nil && !utf8.ValidString(v) {
			err = usageErrorf("--%s %q is not valid UTF-8", f.Name, v)
		}
	})
	return err
}

// flagErrorSentence rewrites the flag package's terse errors as a sentence that says where to
// look for the accepted flags, or names the flag that was probably meant, naming flags in the
// --name form the help uses.
func flagErrorSentence(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		if _, err := strconv.ParseFloat(name, 64); err == nil {
			return fmt.Sprintf("%s is not accepted here: negative numbers are not allowed", name)
		}
		if s := suggest(dashes(name), flagNames(fs)); s != "" {
			return fmt.Sprintf("unknown flag %s; did you mean %s?", dashes(name), s)
		}
		return fmt.Sprintf("unknown flag %s; add -h to see the flags", dashes(name))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return fmt.Sprintf("flag %s needs a value", dashes(name))
	}
	return strings.Replace(msg, "for flag -", "for flag --", 1)
}

// dashes spells a flag name with two dashes, however it was typed.
func dashes(name string) string {
	return "--" + strings.TrimLeft(name, "-")
}

// parseCommonOnly parses the arguments of a command that takes the common flags and nothing
// else.
func parseCommonOnly(e *env, c *command, args []string) (*commonFlags, error) {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	return cf, positionals(pos)
}

// positionals checks the number of positional arguments; names label them in the message.
func positionals(pos []string, names ...string) error {
	switch {
	case len(pos) < len(names):
		return usageErrorf("missing %s", strings.Join(names[len(pos):], " and "))
	case len(pos) > len(names):
		return usageErrorf("unexpected argument %q", pos[len(names)])
	}
	return nil
}

// The bounds of the flags several commands take, as the broker checks them.
const (
	minPriority, maxPriority = -1000, 1000
	maxAttemptsLimit         = 1_000_000
	maxConcurrencyLimit      = 100000
)

// checkRange refuses the value n of flag --name outside lo..hi.
func checkRange(name string, n, lo, hi int) error {
	if n < lo || n > hi {
		return usageErrorf("--%s %d is outside %d..%d", name, n, lo, hi)
	}
	return nil
}

// parseID reads a job id.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("job id %q is not a positive integer", s)
	}
	return id, nil
}

// parseDuration reads Go durations (90s, 1h30m) and whole days (7d), since retention and
// look-back windows are usually spoken of in days.
func parseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100000 {
			return 0, fmt.Errorf("invalid duration %q (use e.g. 90s, 15m, 2h or 7d)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (use e.g. 90s, 15m, 2h or 7d)", s)
	}
	return d, nil
}

// durationValue is a flag.Value for parseDuration.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return ""
	}
	return v.d.String()
}

func (v durationValue) typeName() string { return "duration" }

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseTime reads an RFC 3339 time such as 2030-01-02T15:04:05Z.
func parseTime(flagName, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usageErrorf("--%s %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", flagName, s)
	}
	return t, nil
}

// parseJSONPayload checks a payload locally, so a typo fails here with exit 2 instead of
// becoming a job that can only fail.
func parseJSONPayload(flagName, s string) ([]byte, error) {
	if !json.Valid([]byte(s)) {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		return nil, usageErrorf("--%s is not valid JSON: %v", flagName, err)
	}
	return []byte(s), nil
}

// enumValue finds an enum value by its short name ("dead", "max-attempts-exhausted") or its
// full protobuf name ("JOB_STATE_DEAD").
func enumValue(values map[string]int32, prefix, s string) (int32, bool) {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if !strings.HasPrefix(name, prefix) {
		name = prefix + name
	}
	v, ok := values[name]
	if !ok || v == 0 {
		return 0, false
	}
	return v, true
}

// enumChoices lists an enum's short names for messages.
func enumChoices(names map[int32]string, prefix string) string {
	var out []string
	for v := int32(1); ; v++ {
		n, ok := names[v]
		if !ok {
			break
		}
		out = append(out, strings.ToLower(strings.TrimPrefix(n, prefix)))
	}
	return strings.Join(out, ", ")
}

func parseState(s string) (jobwirev1.JobState, error) {
	v, ok := enumValue(jobwirev1.JobState_value, "JOB_STATE_", s)
	if !ok {
		return 0, usageErrorf("unknown job state %q; want one of %s", s, enumChoices(jobwirev1.JobState_name, "JOB_STATE_"))
	}
	return jobwirev1.JobState(v), nil
}

func parseDeadReason(s string) (jobwirev1.DeadReason, error) {
	v, ok := enumValue(jobwirev1.DeadReason_value, "DEAD_REASON_", s)
	if !ok {
		return 0, usageErrorf("unknown dead reason %q; want one of %s", s, enumChoices(jobwirev1.DeadReason_name, "DEAD_REASON_"))
	}
	return jobwirev1.DeadReason(v), nil
}

func parseBreakerState(s string) (jobwirev1.BreakerState, error) {
	v, ok := enumValue(jobwirev1.BreakerState_value, "BREAKER_STATE_", s)
	if !ok {
		return 0, usageErrorf("unknown breaker state %q; want closed, open or half-open", s)
	}
	return jobwirev1.BreakerState(v), nil
}

// flagGiven reports whether the named flag was given on the command line, to tell "--priority 0"
// from no --priority at all.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}
