// Follows a live run's durable stream (section#live[data-stream]) with an EventSource on this
// inspector's own read-only route, and shows the answer as it is written: deltas build a
// partial message per model request, `void` drops it (a restarted request), `message`
// replaces it with the final one. Stored text is only ever written with textContent.
"use strict";
(function () {
  var KINDS = ["part_start", "part_delta", "part_end", "void", "message", "tool_result",
    "paused", "event", "result"];

  function start(panel) {
    var list = panel.querySelector(".live-turns");
    var state = panel.querySelector(".live-state");
    var turns = {}; // key → {node, parts: {index: text}, final}
    var last = 0;

    function turn(key, cls) {
      if (!turns[key]) {
        var node = document.createElement("div");
        node.className = "live-turn " + cls;
        list.appendChild(node);
        turns[key] = { node: node, parts: {}, final: false };
      }
      panel.hidden = false;
      return turns[key];
    }

    function draw(entry) {
      var keys = Object.keys(entry.parts).map(Number).sort(function (a, b) { return a - b; });
      entry.node.textContent = keys.map(function (k) { return entry.parts[k]; }).join("");
      entry.node.classList.toggle("partial", !entry.final);
    }

    function finalText(response) {
      var parts = (response && response.parts) || [];
      return parts.map(function (part) {
        if (part.type === "text") { return part.text; }
        return "→ " + (part.tool_name || "tool") + "(" + JSON.stringify(part.arguments || {}) + ")\n";
      });
    }

    function apply(kind, item) {
      var key = "r" + item.request;
      var entry;
      if (kind === "part_start" || kind === "part_delta") {
        entry = turn(key, "assistant");
        if (entry.final) { return; }
        if (entry.parts[item.index] === undefined) {
          entry.parts[item.index] = item.tool_name ? "→ " + item.tool_name + " " : "";
        }
        if (kind === "part_delta") { entry.parts[item.index] += item.delta; }
        draw(entry);
      } else if (kind === "void") {
        entry = turn(key, "assistant");
        if (!entry.final) { entry.parts = {}; draw(entry); }
      } else if (kind === "message") {
        entry = turn(key, "assistant");
        entry.parts = finalText(item.response);
        entry.final = true;
        draw(entry);
      } else if (kind === "tool_result") {
        entry = turn("t" + item.tool_call_id, "tool");
        entry.parts = [(item.tool_name || "tool") + " ⇒ " +
          (typeof item.content === "string" ? item.content : JSON.stringify(item.content))];
        entry.final = true;
        draw(entry);
      } else if (kind === "paused") {
        state.textContent = "paused: waiting for approval";
      } else if (kind === "result") {
        state.textContent = "finished (" + item.status + "); reload for the full record";
      }
    }

    var source = new EventSource(panel.dataset.stream);
    source.onopen = function () { state.textContent = "following"; };
    source.onerror = function () {
      state.textContent = source.readyState === EventSource.CLOSED ? "closed" : "reconnecting…";
    };
    KINDS.forEach(function (kind) {
      source.addEventListener(kind, function (event) {
        var offset = Number(event.lastEventId);
        if (offset && offset <= last) { return; } // already applied
        last = offset || last;
        apply(kind, JSON.parse(event.data));
        if (kind === "result") { source.close(); }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var panel = document.querySelector("section#live[data-stream]");
    if (panel && window.EventSource) { start(panel); }
  });
})();
