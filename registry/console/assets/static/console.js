// Muster console: the little script the server-rendered pages need. It keeps
// the access token on every request, swaps in the live part the server
// re-renders on each change (server-sent events), asks for a confirmation
// before each write, and counts down a patch's remaining time. No library,
// no build step.
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  let token = params.get("accessToken") || sessionStorage.getItem("musterToken") || "";
  if (params.get("accessToken")) sessionStorage.setItem("musterToken", token);
  const body = document.body;

  // withToken adds the access token to a console URL.
  function withToken(url) {
    if (!token) return url;
    const u = new URL(url, location.href);
    u.searchParams.set("accessToken", token);
    return u.pathname + u.search;
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Sign in: the host's login endpoint takes username and password,
  // form-encoded, and answers {"accessToken": ...}.
  const login = document.getElementById("login");
  if (login && body.dataset.login) {
    login.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const err = document.getElementById("login-error");
      err.textContent = "";
      try {
        const resp = await fetch(body.dataset.login, {
          method: "POST",
          headers: { "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(new FormData(login)),
        });
        const data = await resp.json().catch(() => ({}));
        if (!resp.ok || !data.accessToken) throw new Error(data.message || data.error || resp.statusText || "sign-in refused");
        token = data.accessToken;
        sessionStorage.setItem("musterToken", token);
        location.replace(withToken(location.href));
      } catch (e) {
        err.textContent = String(e.message || e);
      }
    });
  }
  const logout = document.getElementById("logout");
  if (logout) {
    logout.addEventListener("click", (ev) => {
      ev.preventDefault();
      sessionStorage.removeItem("musterToken");
      location.replace("./");
    });
  }

  // Whether the user may write: the server leaves the buttons out for a
  // read-only user, and this hides any that a cached page still shows.
  const nsParam = params.get("ns") || "";
  fetch(withToken("api/me?ns=" + encodeURIComponent(nsParam))).then((r) => r.ok ? r.json() : null).then((me) => {
    if (me && !me.write) body.classList.add("ro");
  }).catch(() => {});

  // The live part.
  const live = document.getElementById("live");
  const conn = document.getElementById("conn");
  if (live && live.dataset.stream) {
    const es = new EventSource(live.dataset.stream);
    es.addEventListener("open", () => { conn.className = "conn on"; });
    es.addEventListener("error", () => { conn.className = "conn off"; });
    es.addEventListener("live", (ev) => {
      live.innerHTML = ev.data;
      conn.className = "conn on";
      body.dataset.updates = String(Number(body.dataset.updates || "0") + 1);
      tick();
    });
  } else if (conn) {
    conn.remove();
  }

  // Countdowns: a patch whose instance is gone is dropped at its deadline.
  function tick() {
    for (const c of document.querySelectorAll(".countdown[data-deadline]")) {
      const left = Math.max(0, Math.round((Number(c.dataset.deadline) - Date.now()) / 1000));
      c.textContent = left + " s";
    }
  }
  setInterval(tick, 1000);
  tick();

  // Writes, each behind a confirmation.
  const dialog = document.getElementById("confirm");
  const dTitle = document.getElementById("confirm-title");
  const dBody = document.getElementById("confirm-body");
  const dErr = document.getElementById("confirm-error");
  let pending = null; // () => Promise of the request body and endpoint

  async function post(path, payload) {
    const resp = await fetch(withToken(path), {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(payload),
    });
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(data.error || resp.status + " " + resp.statusText);
    return data;
  }

  function open(title, fields, run) {
    dTitle.textContent = title;
    dBody.replaceChildren(...fields);
    dErr.textContent = "";
    pending = run;
    dialog.showModal();
  }

  function field(label, input) {
    const l = el("label", {}, label + " ");
    l.appendChild(input);
    return l;
  }

  const actions = {
    patch(btn, key) {
      const w = el("input", { type: "number", min: "0", max: "10000", step: "any", id: "patch-weight", value: btn.dataset.weight });
      const en = el("input", { type: "checkbox", id: "patch-enabled" });
      en.checked = btn.dataset.enabled === "true";
      open("Patch " + key.ip + ":" + key.port, [
        field("Weight", w), field("Enabled", en),
        el("p", { class: "note" }, "The patch overrides what the instance's publisher registered, on every node, until removed; it is dropped a while (PatchTTL) after the instance leaves."),
      ], () => post("api/patch", { instance: key, weight: Number(w.value), enabled: en.checked }));
    },
    unpatch(btn, key) {
      open("Remove the patch of " + key.ip + ":" + key.port, [el("p", {}, "The instance is served as its publisher registered it again.")],
        () => post("api/unpatch", { instance: key }));
    },
    deregister(btn, key) {
      open("Deregister " + key.ip + ":" + key.port, [el("p", {}, "This persistent instance is removed from the store on every node, until it is registered again.")],
        () => post("api/deregister", { instance: key }));
    },
    service(btn) {
      const svc = JSON.parse(btn.dataset.service);
      const checks = JSON.parse(btn.dataset.checks || "[]");
      const th = el("input", { type: "number", min: "0", max: "1", step: "0.01", id: "svc-threshold", value: btn.dataset.threshold });
      const fields = [field("Protection threshold (0–1)", th)];
      const rows = [];
      for (const c of checks) {
        const hc = c.healthCheck || {};
        const fs = el("fieldset");
        fs.appendChild(el("legend", {}, "Cluster " + c.name));
        const type = el("select", { class: "check-type" });
        for (const t of ["TCP", "HTTP", "MYSQL", "NONE"]) {
          const o = el("option", { value: t }, t);
          if ((hc.type || "TCP") === t) o.selected = true;
          type.appendChild(o);
        }
        const port = el("input", { type: "number", min: "0", max: "65535", value: hc.port || 0 });
        const path = el("input", { value: hc.path || "" });
        const codes = el("input", { value: (hc.expectedCodes || []).join(","), placeholder: "200" });
        const user = el("input", { value: hc.user || "" });
        const pass = el("input", { type: "password", placeholder: "unchanged" });
        const cmd = el("input", { value: hc.command || "" });
        fs.append(field("Type", type), field("Port (0: the instance's)", port), field("HTTP path", path),
          field("HTTP codes", codes), field("MySQL user", user), field("MySQL password", pass), field("MySQL command", cmd));
        fields.push(fs);
        rows.push({ name: c.name, type, port, path, codes, user, pass, cmd });
      }
      open("Edit " + (svc.group || "DEFAULT_GROUP") + "@@" + svc.name, fields, () => post("api/service", {
        service: svc,
        protectThreshold: Number(th.value),
        clusters: rows.map((r) => ({
          name: r.name,
          healthCheck: {
            type: r.type.value, port: Number(r.port.value), path: r.path.value,
            expectedCodes: r.codes.value.split(",").map((s) => s.trim()).filter(Boolean).map(Number),
            user: r.user.value, command: r.cmd.value,
          },
          password: r.pass.value === "" ? null : r.pass.value,
        })),
      }));
    },
  };

  document.addEventListener("click", (ev) => {
    const btn = ev.target.closest("button.act");
    if (!btn) return;
    ev.preventDefault();
    const act = actions[btn.dataset.act];
    if (act) act(btn, btn.dataset.key ? JSON.parse(btn.dataset.key) : null);
  });
  if (dialog) {
    document.getElementById("confirm-cancel").addEventListener("click", () => dialog.close());
    document.getElementById("confirm-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!pending) return;
      try {
        await pending();
        pending = null;
        dialog.close();
      } catch (e) {
        dErr.textContent = String(e.message || e);
      }
    });
  }

  // The consistency check.
  const cmp = document.getElementById("compare");
  if (cmp) {
    cmp.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const out = document.getElementById("compare-result");
      out.textContent = "checking…";
      try {
        const f = new FormData(cmp);
        const data = await post("api/compare", { from: f.get("from"), peer: f.get("peer") });
        out.innerHTML = data.html;
      } catch (e) {
        out.replaceChildren(el("p", { class: "err" }, String(e.message || e)));
      }
    });
  }
})();
