package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// writerMetric is the broker's running total, in seconds, of the time its writer spent
// writing batches (broker/commit: a batch's statements and its commit, one transaction at a
// time). Its growth over a window, divided by the window, is the share of the window the
// writer was busy: every enqueue, lease and result waits in the writer's queue while it is,
// so a share near 100% says the latency is the queue's, however cheap each write.
const writerMetric = "jobwire_storage_commit_duration_seconds_sum"

// writerTime reads the broker's writerMetric from its metrics endpoint. ok is false where the
// broker has no HTTP listener or serves no metrics (--metrics off).
func (b *brokerProc) writerTime() (d time.Duration, ok bool) {
	if b.http == "" {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.http+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	secs, ok, err := metricValue(resp.Body, writerMetric)
	if err != nil || !ok {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// metricValue returns the value of the unlabelled sample name in a Prometheus text
// exposition; ok is false when it holds none.
func metricValue(r io.Reader, name string) (v float64, ok bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), name+" ")
		if !found {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric %s: %w", name, err)
		}
		return v, true, nil
	}
	return 0, false, sc.Err()
}

// writerMeter measures the share of a window the busiest of a scenario's brokers' writers spent
// writing.
type writerMeter struct {
	brokers []*brokerProc
	began   time.Time
	start   []time.Duration
	ok      bool
}

// meterWriters starts measuring the writers of brokers.
func meterWriters(brokers []*brokerProc) writerMeter {
	m := writerMeter{brokers: brokers, began: time.Now(), ok: len(brokers) > 0}
	for _, b := range brokers {
		d, ok := b.writerTime()
		m.start = append(m.start, d)
		m.ok = m.ok && ok
	}
	return m
}

// busy returns the share of the time since the meter started, in percent, that the busiest
// writer spent writing; 0 when it cannot be read.
func (m writerMeter) busy() float64 {
	if !m.ok {
		return 0
	}
	el := time.Since(m.began)
	var most time.Duration
	for i, b := range m.brokers {
		d, ok := b.writerTime()
		if !ok {
			return 0
		}
		most = max(most, d-m.start[i])
	}
	return 100 * float64(most) / float64(el)
}
