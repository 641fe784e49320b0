"use strict";
// The rate limits page: each limit with its allowance now, and for an admin, a form to set one
// and a button to remove one. It uses app.js's helpers and page table.

pages.ratelimits = {
  render(main) {
    this.list = el("div");
    this.form = el("div");
    append(main, [el("h1", {}, "Rate limits"), el("section", {}, this.list), el("section", {}, this.form)]);
    if (isAdmin()) this.drawForm();
  },
  drawForm() {
    const f = {
      name: el("input", { placeholder: "name", ariaLabel: "limit name", size: 12 }),
      rate: el("input", { type: "number", min: 1, value: 10, size: 6, ariaLabel: "rate" }),
      interval: el("input", { value: "1s", size: 5, ariaLabel: "interval", title: "seconds, such as 1s or 60s" }),
      burst: el("input", { type: "number", min: 0, value: 0, size: 5, ariaLabel: "burst" }),
      type: el("input", { placeholder: "any type", ariaLabel: "type", size: 12 }),
      queue: el("input", { placeholder: "any queue", ariaLabel: "queue", size: 10 }),
      key: el("input", { placeholder: "no key, or payload.customer_id", ariaLabel: "key", size: 22 }),
    };
    const set = () => act(() => write("SetRateLimit", { limit: { name: f.name.value, rate: Number(f.rate.value),
      interval: f.interval.value, burst: Number(f.burst.value), type: f.type.value, queue: f.queue.value, key: f.key.value } }));
    append(this.form, [el("h2", {}, "Set a limit"), el("p", { class: "row" }, f.name, f.rate, " per ", f.interval,
      " burst ", f.burst, f.type, f.queue, f.key, adminButton("Set", set))]);
  },
  async refresh() {
    const res = await read("ListRateLimits");
    clear(this.list).appendChild(table(["Name", "Type", "Queue", "Key", ["Rate", "num"], ["Burst", "num"], ["Allowance", "num"], "Next start",
      ["Keys limited", "num"], ""],
      (res.limits || []).map((i) => {
        const l = i.limit || {};
        return el("tr", { class: i.allowance > 0 ? "" : "alert", dataset: { limit: l.name } },
          td(l.name), td(l.type || "any"), td(l.queue || "any"), td(l.key || "-"), td(l.rate + " / " + fmtDur(l.interval), "num"),
          num(l.burst), td(fmtNum(i.allowance), "num allowance"), td(fmtTime(i.next_at)),
          td(l.key ? fmtNum(i.keys_limited) + " of " + fmtNum(i.keys) : "-", "num"),
          td(adminButton("Remove", () => act(() => write("RemoveRateLimit", { name: l.name })))));
      }), "No rate limit is set."));
  },
};

// app.js may have routed before this file ran: route again if the page asked for is this one.
if (location.hash.startsWith("#/ratelimits") && state.route !== "ratelimits") route();
