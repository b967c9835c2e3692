// lakelog's web console, the records view of a topic page: a typed topic's records by field (one column per
// top-level field of the value as its registered schema decodes it, `value_typed`; nested values as compact
// JSON), any other topic's records (or a page of typed records none of which decode) as key and value.
// Loaded before console.js, whose helpers (el, table, encoded, formatTime) it calls.
"use strict";

function isTyped(described) { return described.config["confluent.value.schema.validation"] === true; }

function recordsQuery(typed, format) {
  return `&value_format=${format}` + (typed ? "&value_typed=true" : "");
}

function recordsTable(answer, empty) {
  const fields = [];  // in the schema's order (every decoded record has them all: the table's merged type)
  for (const r of answer.records) {
    for (const name of Object.keys(r.value_typed || {})) if (!fields.includes(name)) fields.push(name);
  }
  const start = (r) => [r.offset, formatTime(r.timestamp), encoded(r.key, r.key_encoding)];
  const headers = (r) => r.headers.map((h) => `${h.key}=${h.value === null ? "null" : h.value}`).join(", ");
  const head = [["Offset", { num: true }], ["Timestamp"], ["Key", { cls: "value" }]];
  if (!fields.length) {
    return table("records", [...head, ["Value", { cls: "value" }], ["Headers", { cls: "value" }]],
      answer.records.map((r) => [...start(r), encoded(r.value, r.value_encoding), headers(r)]), empty);
  }
  const undecoded = answer.records.some((r) => !r.value_typed);  // their bytes get a column of their own
  const columns = [...head, ...fields.map((name) => [name, { cls: "value", th: "field" }]),
                   ...(undecoded ? [["Value (not decoded)", { cls: "value" }]] : []), ["Headers", { cls: "value" }]];
  const node = table("records", columns, answer.records.map((r) => [
    ...start(r), ...fields.map((name) => (r.value_typed ? encoded(r.value_typed[name]) : "")),
    ...(undecoded ? [r.value_typed ? "" : encoded(r.value, r.value_encoding)] : []), headers(r)]), empty);
  node.dataset.view = "fields";
  return node;
}
