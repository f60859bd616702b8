/* Harbor pages: live updates over /ws/events/, relative times, deadline countdowns and
   the argument diff. Plain JavaScript, no build step; every page works without it. */
(function () {
  "use strict";

  const body = document.body;
  const page = body.dataset.page;

  /* ---- Relative times and countdowns ------------------------------------------------ */

  function relative(date) {
    const seconds = Math.round((Date.now() - date.getTime()) / 1000);
    const abs = Math.abs(seconds);
    const unit = abs < 60 ? [abs, "s"] : abs < 3600 ? [Math.floor(abs / 60), "min"]
      : abs < 86400 ? [Math.floor(abs / 3600), "h"] : [Math.floor(abs / 86400), "d"];
    if (abs < 5) return "just now";
    return seconds >= 0 ? `${unit[0]} ${unit[1]} ago` : `in ${unit[0]} ${unit[1]}`;
  }

  function countdown(deadline) {
    let left = Math.round((deadline.getTime() - Date.now()) / 1000);
    if (left <= 0) return ["expired", true];
    const h = Math.floor(left / 3600); left -= h * 3600;
    const m = Math.floor(left / 60); const s = left - m * 60;
    const text = (h ? `${h}h ` : "") + (h || m ? `${m}m ` : "") + `${s}s left`;
    return [text, deadline.getTime() - Date.now() < 60000];
  }

  function tick(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach((el) => {
      const d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) el.textContent = relative(d);
    });
    (root || document).querySelectorAll("[data-deadline]").forEach((el) => {
      const d = new Date(el.dataset.deadline);
      if (isNaN(d)) return;
      const [text, urgent] = countdown(d);
      el.textContent = text;
      el.classList.toggle("urgent", urgent);
    });
  }
  setInterval(tick, 1000);
  tick();

  /* ---- Notes -------------------------------------------------------------------------- */

  function note(text) {
    const box = document.querySelector("[data-toasts]");
    if (!box) return;
    const el = document.createElement("div");
    el.className = "toast";
    el.textContent = text;
    box.appendChild(el);
    setTimeout(() => el.remove(), 12000);
  }

  /* ---- The socket ------------------------------------------------------------------- */

  const indicator = document.querySelector("[data-live-indicator]");
  function setLive(on) {
    if (!indicator) return;
    indicator.hidden = false;
    indicator.textContent = on ? "live" : "reconnecting…";
    indicator.classList.toggle("offline", !on);
  }

  /* A frame the page cannot read or show: it says so and reloads (the server renders the
     whole state), at most once a minute, so a frame that fails again leaves it saying so
     instead of reloading in a loop. */
  const RELOADED = "harbor-stale-reload";
  function stale(socket, error) {
    console.error("live update not shown:", error);
    socket.onclose = null;
    socket.close();
    setLive(false);
    if (indicator) indicator.textContent = "out of date: reload";
    const last = Number(sessionStorage.getItem(RELOADED) || 0);
    if (Date.now() - last > 60000) {
      sessionStorage.setItem(RELOADED, String(Date.now()));
      if (indicator) indicator.textContent = "out of date: reloading…";
      location.reload();
    }
  }

  /* Listen to /ws/events/ (narrowed to one run when given). After any drop (a server or
     Redis restart, the network) it reconnects with a growing, jittered delay and asks for a
     replay after the last sequence seen, so nothing is missed. */
  function listen({ run, after, onEvent, onOpen }) {
    let cursor = after;
    let delay = 500;
    let timer = null;
    function connect() {
      timer = null;
      const params = new URLSearchParams();
      if (run) params.set("run", run);
      if (body.dataset.types) params.set("types", body.dataset.types); // what this page shows
      if (cursor !== undefined && cursor !== null) params.set("after", String(cursor));
      const scheme = location.protocol === "https:" ? "wss" : "ws";
      const socket = new WebSocket(`${scheme}://${location.host}${body.dataset.ws}?${params}`);
      socket.onopen = () => { delay = 500; setLive(true); if (onOpen) onOpen(); };
      socket.onmessage = (message) => {
        let envelope;
        try {
          envelope = JSON.parse(message.data);
          if (typeof envelope.sequence !== "number" || typeof envelope.type !== "string") throw new Error("not an event");
          onEvent(envelope);
        } catch (error) {
          stale(socket, error); // never "live" while what arrives is not shown
          return;
        }
        cursor = Math.max(cursor || 0, envelope.sequence);
      };
      socket.onclose = (event) => {
        setLive(false);
        if (event.code === 4409) { location.reload(); return; } // the person's role changed: the page is stale
        if (event.code === 4400 || event.code === 4401 || event.code === 4403 || event.code === 4404) {
          if (indicator) indicator.textContent = "offline";
          return; // refused, signed out, revoked or gone: reconnecting would not help
        }
        timer = setTimeout(connect, delay * (0.75 + Math.random() / 2)); // jitter: not all at once after a restart
        delay = Math.min(delay * 2, 10000);
      };
    }
    // Back online: retry now rather than at the end of a long backoff.
    window.addEventListener("online", () => {
      if (timer === null) return;
      clearTimeout(timer);
      delay = 500;
      connect();
    });
    connect();
  }

  function debounce(fn, ms) {
    let timer = null;
    return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
  }

  async function fetchFragment(url) {
    const headers = { "X-Requested-With": "fetch", "X-Harbor-Tenant": body.dataset.tenant || "" };
    const response = await fetch(url || body.dataset.fragment, { headers, credentials: "same-origin" });
    if (response.status === 409) { location.reload(); throw new Error("fragment: another tenant now"); } // switched in another tab
    if (!response.ok) throw new Error(`fragment: ${response.status}`);
    const template = document.createElement("template");
    template.innerHTML = await response.text();
    return template.content;
  }

  /* ---- The argument editor: a diff of the edits before approving ---------------------- */

  function wireEditors(root) {
    root.querySelectorAll("[data-approve-form]").forEach((form) => {
      if (form.dataset.wired) return;
      form.dataset.wired = "1";
      const diff = form.querySelector("[data-diff]");
      const button = form.querySelector("[data-approve-button]");
      const inputs = form.querySelectorAll("[data-arg]");
      if (!diff || !inputs.length) return;
      const render = () => {
        diff.replaceChildren();
        let changes = 0;
        inputs.forEach((input) => {
          if (input.value === input.dataset.original) return;
          changes += 1;
          const del = document.createElement("span");
          del.className = "del";
          del.textContent = `- ${input.dataset.arg}: ${input.dataset.original}`;
          const add = document.createElement("span");
          add.className = "add";
          add.textContent = `+ ${input.dataset.arg}: ${input.value}`;
          diff.append(del, add);
        });
        if (!changes) {
          const none = document.createElement("span");
          none.className = "muted";
          none.textContent = "No changes.";
          diff.append(none);
        }
        button.textContent = changes ? `Approve with ${changes} edit${changes > 1 ? "s" : ""}` : "Approve";
      };
      inputs.forEach((input) => input.addEventListener("input", render));
      render();
    });
  }
  wireEditors(document);

  /* ---- Inbox: new pauses appear, decided ones leave ---------------------------------- */

  /* The inbox shows a page of cards, newest first; "Show older pauses" appends the next
     page. Each card's data-key is its place in that order (keys compare as strings).
     On a pause event the page asks only for what arrived since its newest card (most
     often one card or none: cheap for the server however many inboxes are open), and a
     card leaves when its run's pause.resumed arrives. When the socket (re)opens, or more
     arrived than a page holds, the first page is fetched again and reconciled: within
     the span it covers it is the truth. The count is always the server's. */
  if (page === "inbox") {
    const actors = {}; // run id -> who decided, from tool.approved / tool.rejected
    const decided = {}; // run id -> { decision, at }, from pause.resumed
    const list = document.querySelector("[data-cards]");
    const cards = () => [...list.querySelectorAll("[data-pause]")];
    // A card whose run has since had its pause decided (a page fetched just before).
    const stale = (card) => {
      const gone = decided[card.dataset.run];
      return Boolean(gone) && new Date(card.dataset.created) <= gone.at;
    };
    const initialEmpty = list.querySelector("[data-empty]");
    if (initialEmpty) list.emptyState = initialEmpty.cloneNode(true);

    const settle = () => {
      const count = list.querySelectorAll("[data-pause]:not(.leaving)").length;
      const empty = list.querySelector("[data-empty]");
      if (count && empty) empty.remove();
      if (!count && !empty && list.emptyState) list.append(list.emptyState.cloneNode(true));
    };

    function leave(card) {
      if (card.classList.contains("leaving")) return;
      const run = card.dataset.run;
      const who = actors[run] ? ` by ${actors[run]}` : "";
      const what = decided[run] ? ` (${decided[run].decision})` : "";
      const title = card.querySelector("h2").textContent.replace(/\s+/g, " ").trim();
      if (decided[run] && decided[run].decision === "timeout") note(`“${title}” expired.`);
      else note(`“${title}” was decided elsewhere${who}${what}.`);
      card.classList.add("leaving");
      setTimeout(() => { card.remove(); settle(); }, 400);
    }

    // Insert before the first card that comes after it in the order, else at the end.
    function place(card, arrived) {
      const next = cards().find((c) => c.dataset.key < card.dataset.key);
      list.insertBefore(card, next || null);
      if (arrived) card.classList.add("arrived");
      wireEditors(card);
      tick(card);
    }

    function adopt(incoming) {
      const total = incoming.dataset.total;
      list.dataset.total = total;
      const counter = document.querySelector("[data-open-count]");
      if (counter) counter.textContent = total;
      const empty = incoming.querySelector("[data-empty]");
      if (empty) list.emptyState = empty.cloneNode(true);
    }

    async function reconcile() {
      const fresh = await fetchFragment();
      const incoming = fresh.querySelector("[data-cards]");
      const fetched = [...incoming.querySelectorAll("[data-pause]")];
      const keep = new Set(fetched.map((c) => c.dataset.pause));
      // The span the fetched page speaks for: all of it when nothing follows.
      const edge = incoming.dataset.next ? fetched[fetched.length - 1].dataset.key : "";
      const beyond = cards().filter((c) => c.dataset.key < edge);
      // Cards shown further down stay only if they join the fetched span without a gap.
      const joined = beyond.length && cards().some((c) => c.dataset.key >= edge);
      cards().forEach((card) => {
        const dropped = card.dataset.key < edge && !joined;
        if (dropped) card.remove();
        else if ((card.dataset.key >= edge && !keep.has(card.dataset.pause)) || stale(card)) leave(card);
      });
      const present = new Set(cards().map((c) => c.dataset.pause));
      fetched.forEach((card) => { if (!present.has(card.dataset.pause) && !stale(card)) place(card, true); });
      adopt(incoming);
      if (!joined) document.querySelector("[data-more]").replaceWith(fresh.querySelector("[data-more]"));
      settle(); // arrivals count at once; leavers settle when they have gone
    }

    async function arrivals() {
      const newest = cards().find((c) => !c.classList.contains("leaving"));
      if (!newest) return reconcile();
      const url = new URL(body.dataset.fragment, location.href);
      url.searchParams.set("after", newest.dataset.key);
      const fresh = await fetchFragment(url.toString());
      const incoming = fresh.querySelector("[data-cards]");
      if (incoming.dataset.next) return reconcile(); // more than a page arrived
      cards().forEach((card) => { if (stale(card)) leave(card); });
      const present = new Set(cards().map((c) => c.dataset.pause));
      incoming.querySelectorAll("[data-pause]").forEach((card) => {
        if (!present.has(card.dataset.pause) && !stale(card)) place(card, true);
      });
      adopt(incoming);
      settle();
    }

    const refresh = debounce(reconcile, 150);
    const update = debounce(arrivals, 150);

    // "Show older pauses": the link works without JavaScript; with it, the older page is
    // appended here and stays live.
    document.addEventListener("click", async (event) => {
      const link = event.target.closest("[data-more-link]");
      if (!link) return;
      event.preventDefault();
      link.setAttribute("aria-busy", "true");
      const url = new URL(link.href);
      url.searchParams.set("fragment", "cards");
      let fresh;
      try { fresh = await fetchFragment(url.toString()); } catch (error) { location.href = link.href; return; }
      const present = new Set(cards().map((c) => c.dataset.pause));
      fresh.querySelectorAll("[data-cards] [data-pause]").forEach((card) => {
        if (!present.has(card.dataset.pause) && !stale(card)) place(card, false);
      });
      adopt(fresh.querySelector("[data-cards]"));
      document.querySelector("[data-more]").replaceWith(fresh.querySelector("[data-more]"));
      settle();
    });

    listen({
      onOpen: refresh,
      onEvent: (e) => {
        if (e.type === "tool.approved" || e.type === "tool.rejected") actors[e.run] = e.payload.Actor;
        if (e.type === "pause.resumed") decided[e.run] = { decision: e.payload.Decision, at: new Date(e.occurred_at) };
        if (e.type.startsWith("pause.")) update(); // cards change only when pauses open or close
      },
    });
  }

  /* ---- Runs list: rows follow the runs ----------------------------------------------- */

  if (page === "console") {
    const refresh = debounce(async () => {
      const fresh = await fetchFragment();
      const rows = fresh.querySelector("[data-rows]");
      const current = document.querySelector("[data-rows]");
      const before = new Map([...current.querySelectorAll("tr[data-run]")].map((r) => [r.dataset.run, r.dataset.status]));
      rows.querySelectorAll("tr[data-run]").forEach((row) => {
        if (before.get(row.dataset.run) !== row.dataset.status) row.classList.add("changed");
      });
      current.replaceWith(rows);
      const filters = fresh.querySelector("[data-filters]");
      if (filters) document.querySelector("[data-filters]").replaceWith(filters);
      tick(rows);
    }, 250);
    listen({
      onOpen: refresh,
      onEvent: (e) => { if (e.type.startsWith("task.") || e.type.startsWith("pause.")) refresh(); },
    });
  }

  /* ---- Run page: the timeline streams in, the state follows -------------------------- */

  const HIDDEN = new Set(["TaskID", "Token", "PauseToken", "AuthorizeURL", "State"]);
  // Bidirectional controls shown, not obeyed, as the server does for pages (runs/web/bidi.py).
  const BIDI = /[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/g;
  function summary(payload) {
    return Object.entries(payload || {})
      .filter(([k, v]) => !k.startsWith("_") && !HIDDEN.has(k) && v !== null && v !== "" &&
        !(Array.isArray(v) && !v.length) && !(typeof v === "object" && !Array.isArray(v) && !Object.keys(v).length))
      .map(([k, v]) => {
        const text = typeof v === "string" ? v : JSON.stringify(v);
        return `${k}: ${text.length > 160 ? text.slice(0, 159) + "…" : text}`;
      }).join(" · ").replace(BIDI, (c) => `[U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}]`);
  }

  if (page === "run") {
    const timeline = document.querySelector("[data-timeline]");
    const scroller = timeline.closest(".timeline-panel");
    const atBottom = () => scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
    scroller.scrollTop = scroller.scrollHeight;
    const seen = new Set([...timeline.querySelectorAll("[data-seq]")].map((li) => Number(li.dataset.seq)));
    const refresh = debounce(async () => {
      const fresh = await fetchFragment();
      const state = document.querySelector("[data-state]");
      const incoming = fresh.querySelector("[data-state]");
      const oldControls = state.querySelector('[data-region="controls"]');
      const newControls = incoming.querySelector('[data-region="controls"]');
      // Keep the controls (and anything half-typed in them) unless what they offer changed.
      if (oldControls && newControls && oldControls.dataset.key === newControls.dataset.key) {
        newControls.replaceWith(oldControls);
      }
      state.replaceWith(incoming);
      tick(incoming);
    }, 200);
    listen({
      run: body.dataset.run,
      after: Number(body.dataset.after || 0),
      onOpen: refresh,
      onEvent: (e) => {
        if (seen.has(e.sequence)) return;
        seen.add(e.sequence);
        const li = document.createElement("li");
        li.className = `ev ev-${e.type.split(".")[0]} new`;
        li.dataset.seq = e.sequence;
        const seq = document.createElement("span"); seq.className = "seq"; seq.textContent = `#${e.sequence}`;
        const type = document.createElement("code"); type.className = "type"; type.textContent = e.type;
        const text = document.createElement("span"); text.className = "summary"; text.textContent = summary(e.payload);
        const time = document.createElement("time"); time.dataset.relative = ""; time.setAttribute("datetime", e.occurred_at);
        time.textContent = relative(new Date(e.occurred_at));
        li.append(seq, type, text, time);
        const follow = atBottom();
        timeline.append(li);
        if (follow) scroller.scrollTop = scroller.scrollHeight; // follow the tail unless reading back
        // Tool and planner steps change nothing the state panels show.
        if (!/^(tool|planner)\./.test(e.type) || e.type === "tool.approval_requested") refresh();
      },
    });
  }
})();
