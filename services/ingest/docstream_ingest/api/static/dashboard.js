// docstream's job dashboard: vanilla JS over the /v1 JSON API (docs/api.md, "Job dashboard").
// Every value from the API is user data (file names, error messages): the DOM is built with
// createElement and text nodes only, never innerHTML. The API key lives in sessionStorage and goes
// out as `Authorization: Bearer`, so the page sees what the key's tenant sees and nothing more.
"use strict";

(() => {
  const KEY_STORAGE = "docstream.apiKey";
  const POLL_MS = 1500; // while a job on the page runs
  const IDLE_POLL_MS = 10000; // the jobs list when none runs: new jobs still appear
  const DOCS_PAGE = 50;
  const CHUNKS_PAGE = 100;
  const TERMINAL_DOC = new Set(["completed", "partial", "failed", "skipped"]);
  const app = document.getElementById("app");
  const who = document.getElementById("who");
  const forget = document.getElementById("forget");
  let view = 0; // bumped on every navigation: a poll of an older view stops itself
  let timer = null;

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message || `HTTP ${status}`);
      this.status = status;
      this.code = code;
    }
  }

  // -- DOM, text only ---------------------------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "onclick") node.addEventListener("click", value);
      else if (name === "onsubmit") node.addEventListener("submit", value);
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function statusBadge(status) {
    const safe = /^[a-z_]+$/.test(status) ? status : "other";
    return el("span", { class: `status status-${safe}` }, status);
  }

  function link(hash, ...children) {
    return el("a", { href: hash }, ...children);
  }

  function table(headers, rows, attrs) {
    const head = el("tr", {}, headers.map(([label, cls]) => el("th", { class: cls || null }, label)));
    return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, rows));
  }

  // -- formats ----------------------------------------------------------------------------

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "—";
    if (seconds < 60) return `${seconds.toFixed(1)} s`;
    const s = Math.round(seconds);
    if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
    return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  }

  function rate(value) {
    if (value === null || value === undefined) return "—";
    return `${value >= 10 ? value.toFixed(1) : value.toPrecision(3)} docs/s`;
  }

  function number(value) {
    return value === null || value === undefined ? "—" : Number(value).toLocaleString("en");
  }

  function when(iso) {
    if (!iso) return "—";
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso) : date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function progressOf(job) {
    const done = job.completed + job.partial + job.failed;
    const total = job.document_count;
    const share = total > 0 ? Math.min(done / total, 1) : null;
    const text = total > 0 ? `${done}/${total} ${Math.floor(share * 100)}%` : `${done}/?`;
    const bar = el("progress", { max: Math.max(total, 1), value: total > 0 ? Math.min(done, total) : 0 });
    return el("div", { class: "progress" }, bar, el("span", { class: "progress-text" }, text));
  }

  function usageOf(job) {
    const usage = job.usage;
    return usage && typeof usage === "object" ? usage : null;
  }

  function modelSeconds(usage) {
    if (!usage || usage.model_seconds === null || usage.model_seconds === undefined) return "—";
    return `${Number(usage.model_seconds).toFixed(2)} s${usage.device ? ` (${usage.device})` : ""}`;
  }

  // -- the API ----------------------------------------------------------------------------

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE);
  }

  async function call(path) {
    const response = await fetch(path, {
      headers: { Authorization: `Bearer ${apiKey() || ""}`, Accept: "application/json" },
      cache: "no-store",
    });
    if (response.status === 401) throw new AuthError("unknown or revoked API key");
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new ApiError(response.status, body.error_code, body.message);
    }
    return response;
  }

  async function get(path) {
    return (await call(path)).json();
  }

  async function download(jobId, withChunks) {
    const query = withChunks ? "?include=chunks" : "";
    const blob = await (await call(`/v1/jobs/${encodeURIComponent(jobId)}/results${query}`)).blob();
    const url = URL.createObjectURL(blob);
    const anchor = el("a", { href: url, download: `${jobId}${withChunks ? "-chunks" : ""}.jsonl`, class: "hidden" });
    document.body.append(anchor);
    anchor.click();
    anchor.remove();
    setTimeout(() => URL.revokeObjectURL(url), 30000);
  }

  // -- navigation and polling -------------------------------------------------------------

  function route() {
    const [path, query] = (location.hash.slice(1) || "/").split("?");
    const params = new URLSearchParams(query || "");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    if (parts.length === 0) return { name: "jobs", params };
    if (parts[0] === "jobs" && parts.length === 2) return { name: "job", jobId: parts[1], params };
    if (parts[0] === "jobs" && parts.length === 4 && parts[2] === "documents") {
      return { name: "document", jobId: parts[1], docId: parts[3], params };
    }
    return { name: "missing", params };
  }

  function render(...nodes) {
    app.replaceChildren(...nodes.flat(Infinity).filter((node) => node !== null && node !== undefined));
  }

  // Runs `load` now and again after the delay it answers (null: never), for as long as this view is shown.
  async function poll(current, load) {
    clearTimeout(timer);
    let delay = null;
    try {
      delay = await load();
    } catch (error) {
      if (current !== view) return;
      failed(error);
      return;
    }
    if (delay !== null && current === view) timer = setTimeout(() => poll(current, load), delay);
  }

  function failed(error) {
    if (error instanceof AuthError) {
      sessionStorage.removeItem(KEY_STORAGE);
      showLogin("That API key is unknown or revoked.");
      return;
    }
    if (error instanceof ApiError && error.status === 404) {
      render(el("h1", {}, "Not found"), el("p", { class: "alert", id: "not-found" }, error.message),
        el("p", {}, link("#/", "All jobs")));
      return;
    }
    render(el("h1", {}, "Error"), el("p", { class: "alert" }, error.message || String(error)));
  }

  function navigate() {
    view += 1;
    clearTimeout(timer);
    if (!apiKey()) {
      showLogin(null);
      return;
    }
    const key = apiKey();
    const match = /^ds_([0-9a-f]{16})_/.exec(key);
    who.textContent = match ? `key ${match[1]}` : "key set";
    forget.hidden = false;
    const current = view;
    const where = route();
    if (where.name === "jobs") poll(current, () => jobsView(where.params.get("after")));
    else if (where.name === "job") poll(current, () => jobView(where.jobId, where.params.get("after")));
    else if (where.name === "document") {
      const after = Number.parseInt(where.params.get("chunks_after") || "-1", 10);
      poll(current, () => documentView(where.jobId, where.docId, Number.isFinite(after) ? after : -1));
    } else failed(new ApiError(404, "not_found", "no such page"));
  }

  // -- the key ----------------------------------------------------------------------------

  function showLogin(message) {
    who.textContent = "";
    forget.hidden = true;
    const input = el("input", { type: "password", id: "api-key", name: "api-key", autocomplete: "off",
      placeholder: "ds_…", required: true, "aria-label": "API key" });
    const form = el("form", { class: "login card", id: "login", onsubmit: (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY_STORAGE, key);
      navigate();
    } },
    el("label", { for: "api-key" }, "API key (from docstream apikey create --tenant T)"), input,
    el("div", {}, el("button", { type: "submit" }, "Open")),
    el("p", { class: "muted" }, "The key stays in this tab (sessionStorage) and is sent only to this API."));
    render(el("h1", {}, "docstream jobs"), message ? el("p", { class: "alert", id: "login-error" }, message) : null,
      form);
    input.focus();
  }

  // -- where a running job stands in its lane (docs/operations.md "Where a job stands") -----

  function queueOf(job) {
    const queue = job.queue;
    if (!queue) return "—";
    if (queue.started) return "started";
    return queue.tokens_ahead ? `${number(queue.tokens_ahead)} tokens ahead` : "first in its lane";
  }

  function startOf(job) {
    const queue = job.queue;
    if (!queue) return "—";
    if (queue.started || queue.start_in_s === 0) return "now";
    if (queue.start_in_s === null || queue.start_in_s === undefined) return "not known yet";
    return `in ${duration(queue.start_in_s)}`;
  }

  // -- jobs -------------------------------------------------------------------------------

  async function jobsView(after) {
    const query = new URLSearchParams({ limit: "50" });
    if (after) query.set("after", after);
    const page = await get(`/v1/jobs?${query}`);
    const withUsage = page.items.some((job) => usageOf(job));
    const headers = [["Job"], ["Status"], ["Lane"], ["Queue"], ["Starts"], ["Progress"], ["Rate", "num"], ["ETA", "num"],
      ["Elapsed", "num"], ["Failed", "num"], ["Created"]];
    if (withUsage) headers.push(["Tokens", "num"], ["Model time", "num"]);
    const rows = page.items.map((job) => {
      const cells = [
        el("td", { class: "id" }, link(`#/jobs/${encodeURIComponent(job.job_id)}`, job.job_id)),
        el("td", {}, statusBadge(job.status)),
        el("td", { class: "lane" }, job.priority || "batch"),
        el("td", { class: "queue" }, queueOf(job)),
        el("td", { class: "starts" }, startOf(job)),
        el("td", {}, progressOf(job)),
        el("td", { class: "num rate" }, rate(job.rate_docs_per_s)),
        el("td", { class: "num eta" }, duration(job.eta_s)),
        el("td", { class: "num" }, duration(job.elapsed_s)),
        el("td", { class: "num" }, number(job.failed)),
        el("td", {}, when(job.created_at)),
      ];
      if (withUsage) {
        const usage = usageOf(job);
        cells.push(el("td", { class: "num tokens" }, number(usage ? usage.tokens : null)),
          el("td", { class: "num" }, modelSeconds(usage)));
      }
      return el("tr", { "data-job-id": job.job_id, "data-status": job.status }, cells);
    });
    const body = page.items.length
      ? table(headers, rows, { id: "jobs" })
      : el("p", { class: "muted", id: "no-jobs" }, "No jobs for this key's tenant yet.");
    const pager = el("div", { class: "pager" }, after ? link("#/", "First page") : null,
      page.next_cursor ? link(`#/?after=${encodeURIComponent(page.next_cursor)}`, "Next page") : null);
    render(el("h1", {}, "Jobs"), body, pager);
    return page.items.some((job) => job.status === "running") ? POLL_MS : IDLE_POLL_MS;
  }

  // -- one job ----------------------------------------------------------------------------

  function facts(pairs) {
    return el("dl", { class: "facts" }, pairs.map(([label, value, cls]) => [el("dt", {}, label),
      el("dd", { class: cls || null }, value)]));
  }

  function usageCard(job) {
    const usage = usageOf(job);
    if (!usage) return null;
    const stages = Object.entries(usage.stage_seconds || {});
    return [
      el("h2", {}, "Usage"),
      el("div", { class: "card", id: "usage" }, facts([
        ["Tokens", number(usage.tokens), "tokens"], ["Model time", modelSeconds(usage)],
        ["Pages", number(usage.pages)], ["Chunks", number(usage.chunks)],
        ...stages.map(([stage, seconds]) => [`Stage ${stage}`, duration(Number(seconds))]),
        ...(usage.prompt_tokens || usage.completion_tokens
          ? [["Chat tokens", `${number(usage.prompt_tokens || 0)} prompt, ${number(usage.completion_tokens || 0)} completion`,
              "chat-tokens"]]
          : []),
      ])),
    ];
  }

  function exportCard(job) {
    const path = `/v1/jobs/${job.job_id}/results`;
    const status = el("span", { class: "muted", id: "export-status" });
    const start = (withChunks) => async () => {
      status.textContent = "downloading…";
      try {
        await download(job.job_id, withChunks);
        status.textContent = "";
      } catch (error) {
        status.textContent = error.message || String(error);
      }
    };
    return el("div", { class: "actions" },
      el("button", { type: "button", id: "export", onclick: start(false) }, "Download results (JSONL)"),
      el("button", { type: "button", id: "export-chunks", onclick: start(true) }, "… with chunks"),
      el("span", { class: "mono muted" }, `GET ${path}[?include=chunks]`), status);
  }

  function documentsTable(jobId, items) {
    const headers = [["Document"], ["Status"], ["Pages", "num"], ["Chunks", "num"], ["Tokens", "num"],
      ["Error code"], ["Message"]];
    const rows = items.map((doc) => el("tr", { "data-doc-id": doc.doc_id, "data-status": doc.status },
      el("td", {}, link(`#/jobs/${encodeURIComponent(jobId)}/documents/${encodeURIComponent(doc.doc_id)}`,
        doc.filename || doc.doc_id)),
      el("td", {}, statusBadge(doc.status)),
      el("td", { class: "num pages" }, number(doc.page_count)),
      el("td", { class: "num chunks" }, number(doc.chunk_count)),
      el("td", { class: "num" }, number(doc.token_count)),
      el("td", { class: "id" }, doc.error_code || ""),
      el("td", { class: "error" }, doc.error || "")));
    return table(headers, rows, { id: "documents" });
  }

  async function jobView(jobId, after) {
    const id = encodeURIComponent(jobId);
    const query = new URLSearchParams({ limit: String(DOCS_PAGE) });
    if (after) query.set("after", after);
    const [job, docs] = await Promise.all([get(`/v1/jobs/${id}?errors_limit=1`), get(`/v1/jobs/${id}/documents?${query}`)]);
    const options = Object.entries(job.options || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—";
    const summary = el("div", { class: "card", id: "job", "data-status": job.status },
      el("div", { class: "actions" }, statusBadge(job.status), progressOf(job)),
      el("br"),
      facts([
        ["Lane", job.priority || "batch"],
        ["Queue", queueOf(job), "queue"], ["Starts", startOf(job), "starts"],
        ["Documents", number(job.document_count)], ["Completed", number(job.completed)],
        ["Partial", number(job.partial)], ["Failed", number(job.failed)],
        ["Pending", number(job.pending)], ["Rate", rate(job.rate_docs_per_s), "rate"],
        ["ETA", duration(job.eta_s), "eta"], ["Elapsed", duration(job.elapsed_s)],
        ["Created", when(job.created_at)], ["Updated", when(job.updated_at)],
        ["Options", options], ["Webhook", job.webhook_url || "—"],
      ]),
      exportCard(job));
    const pager = el("div", { class: "pager" }, after ? link(`#/jobs/${id}`, "First page") : null,
      docs.next_cursor ? link(`#/jobs/${id}?after=${encodeURIComponent(docs.next_cursor)}`, "Next page") : null);
    render(el("div", { class: "crumbs" }, link("#/", "Jobs"), " / ", jobId), el("h1", { class: "mono" }, jobId),
      summary, usageCard(job), el("h2", {}, "Documents"),
      docs.items.length ? documentsTable(jobId, docs.items) : el("p", { class: "muted" }, "No documents yet."),
      pager);
    return job.status === "running" ? POLL_MS : null; // a finished job is not polled again
  }

  // -- one document -----------------------------------------------------------------------

  async function documentView(jobId, docId, after) {
    const job = encodeURIComponent(jobId);
    const base = `/v1/jobs/${job}/documents/${encodeURIComponent(docId)}`;
    const doc = await get(`${base}?chunks_limit=${CHUNKS_PAGE}&chunks_after=${after}`);
    const rows = doc.chunks.map((chunk) => el("tr", { "data-chunk-index": chunk.chunk_index },
      el("td", { class: "num" }, chunk.chunk_index),
      el("td", { class: "num" }, chunk.page_start === chunk.page_end ? chunk.page_start
        : `${chunk.page_start}–${chunk.page_end}`),
      el("td", { class: "num" }, chunk.token_count),
      el("td", {}, statusBadge(chunk.status)),
      el("td", { class: "text" }, chunk.text_start + (chunk.text_chars > chunk.text_start.length ? " …" : ""))));
    const chunks = rows.length
      ? table([["#", "num"], ["Pages", "num"], ["Tokens", "num"], ["Status"], ["Text (start)"]], rows, { id: "chunks" })
      : el("p", { class: "muted", id: "no-chunks" }, TERMINAL_DOC.has(doc.status) ? "No chunks." : "No chunks yet.");
    const here = `#/jobs/${job}/documents/${encodeURIComponent(docId)}`;
    const pager = el("div", { class: "pager" }, after >= 0 ? link(here, "First chunks") : null,
      doc.next_chunks_cursor !== null ? link(`${here}?chunks_after=${doc.next_chunks_cursor}`, "Next chunks") : null);
    render(el("div", { class: "crumbs" }, link("#/", "Jobs"), " / ", link(`#/jobs/${job}`, jobId), " / ",
      doc.filename || docId),
    el("h1", {}, doc.filename || docId),
    el("div", { class: "card", id: "document", "data-status": doc.status }, facts([
      ["Status", statusBadge(doc.status)], ["Pages", number(doc.page_count)],
      ["Chunks", number(doc.chunk_count), "chunks"], ["Tokens", number(doc.token_count)],
      ["Failed chunks", number(doc.failed_chunks)], ["Media type", doc.media_type || "—"],
      ["Error code", doc.error_code || "—"], ["Message", doc.error || "—"],
      ["Document id", doc.doc_id, "mono"], ["SHA-256", doc.content_sha256, "mono"],
      ["Model", doc.model_id, "mono"], ["Updated", when(doc.updated_at)],
    ])),
    el("h2", {}, "Chunks"), chunks, pager);
    return TERMINAL_DOC.has(doc.status) ? null : POLL_MS;
  }

  forget.addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    navigate();
  });
  window.addEventListener("hashchange", navigate);
  navigate();
})();
