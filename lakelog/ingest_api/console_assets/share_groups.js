// lakelog's web console, the share groups' pages (KIP-932, queues): the list, and one group's members, its
// share-partitions (start offset, records in flight) and each in-flight record's state and delivery count.
// Loaded before console.js, whose helpers (api, el, table, replace, enc, formatTime) it calls; console.js
// routes #/share-groups to these pages.
"use strict";

async function shareGroupsPage() {
  view.replaceChildren(el("h1", {}, "Share groups"), el("table", { id: "share-groups" }));
  return async () => {
    const { groups } = await api("/v1/share-groups");
    const details = await Promise.all(groups.map((g) => api("/v1/share-groups/" + enc(g.group))));
    replace("share-groups", table("share-groups",
      [["Group"], ["State"], ["Members", { num: true }], ["Topics"], ["In flight", { num: true }]],
      details.map((d) => [
        el("a", { href: "#/share-groups/" + enc(d.group) }, d.group), d.state, d.members.length,
        [...new Set(d.partitions.map((p) => p.topic))].join(", "),
        d.partitions.reduce((n, p) => n + p.in_flight.length, 0),
      ]), "no share groups (or none you may describe)"));
  };
}

async function shareGroupPage(name) {
  view.replaceChildren(
    el("h1", {}, "Share group ", el("span", { id: "share-group-name" }, name)),
    el("p", { id: "share-group-state" }),
    el("h2", {}, "Members"), el("table", { id: "share-members" }),
    el("h2", {}, "Share-partitions"), el("table", { id: "share-partitions" }),
    el("h2", {}, "Records in flight"), el("table", { id: "in-flight" }),
    el("h2", {}, "Config"), el("table", { id: "share-config" }));
  return async () => {
    const [d, config] = await Promise.all([api("/v1/share-groups/" + enc(name)),
                                           api(`/v1/share-groups/${enc(name)}/config`)]);
    document.getElementById("share-group-state").textContent = `State ${d.state} · epoch ${d.epoch}`;
    const tp = (list) => list.map((a) => `${a.topic}-${a.partition}`).join(", ");
    replace("share-members", table("share-members",
      [["Member"], ["Client id"], ["Host"], ["Topics"], ["Assignment"], ["Last heartbeat", { num: true }]],
      d.members.map((m) => [m.member_id, m.client_id || "-", m.client_host || "-", m.topics.join(", "),
                            tp(m.assignment), `${m.last_heartbeat_ms_ago} ms ago`]),
      "no members"));
    const count = (p, state) => p.in_flight.filter((r) => r.state === state).length;
    replace("share-partitions", table("share-partitions",
      [["Topic"], ["Partition", { num: true }], ["Start offset", { num: true }], ["Next offset", { num: true }],
       ["Acquired", { num: true }], ["Available", { num: true }], ["Done", { num: true }]],
      d.partitions.map((p) => [p.topic, p.partition, p.start_offset, p.next_offset, count(p, "acquired"),
                               count(p, "available"), count(p, "acknowledged") + count(p, "archived")]),
      "no share-partitions yet (created at the first delivery)"));
    const records = d.partitions.flatMap((p) => p.in_flight.map((r) => [p, r]));
    replace("in-flight", table("in-flight",
      [["Topic"], ["Partition", { num: true }], ["Offset", { num: true }], ["State"], ["Delivery count", { num: true }],
       ["Member"], ["Lock until"]],
      records.map(([p, r]) => [p.topic, p.partition, r.offset, r.state, r.delivery_count, r.owner || "-",
                               r.lock_until_ms ? formatTime(r.lock_until_ms) : "-"]),
      "no records in flight: every delivered record is done"));
    replace("share-config", table("share-config", [["Key"], ["Value"], ["Set by"]],
      Object.entries(config.config).sort().map(([k, v]) => [k, v === "" ? "-" : v,
                                                              config.overrides.includes(k) ? "group" : "default"])));
  };
}
