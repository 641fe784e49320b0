// Jobwire dashboard: a job's dependencies on its page (app.js's job page calls depsSection).
// Values from the broker go on the page as text only, as everywhere in app.js.
"use strict";

// jobLinks lists jobs as links to their pages, each with its state when known.
function jobLinks(jobs) {
  return jobs.flatMap((p, i) => [i ? ", " : "", jobLink(p.id), p.state ? " " : "", p.state ? badge(jobState(p.state)) : null]);
}

// depsSection shows a job's parents (with their states), its dependents and its graph, with an
// admin's action on the graph; nothing for a job without dependencies.
function depsSection(d, final) {
  if (!d) return null;
  const parents = d.parents || [], dependents = (d.dependents || []).map((id) => ({ id }));
  const rows = [];
  if (parents.length) rows.push(["Parents", el("span", { id: "parents" }, jobLinks(parents))]);
  if (dependents.length) rows.push(["Dependents", el("span", { id: "dependents" }, jobLinks(dependents))]);
  if (Number(d.graph_id)) rows.push(["Graph", String(d.graph_id)]);
  if (d.run_if_parents_fail) rows.push(["Runs if parents fail", "yes"]);
  if (!final && parents.length) rows.push(["Parents left", String(d.parents_left || 0)]);
  if (Number(d.cancelled_by)) rows.push(["Cancelled by parent", jobLink(d.cancelled_by)]);
  return el("section", { id: "dependencies" }, el("div", { class: "row" }, el("h2", {}, "Dependencies"),
    Number(d.graph_id) ? adminButton("Cancel graph", () => act(() => write("CancelGraph", { graph_id: d.graph_id })), "danger") : null),
  el("dl", { class: "kv" }, rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
}
