// Loads a long run's parts when asked: older turns of the conversation (a.load-older fetches
// the older page and puts its items above the list) and an operation's input or record
// (<details data-src> fetches its JSON on first open). Only same-origin GETs; stored text is
// written with textContent or moved as nodes of our own escaped page, never as markup.
"use strict";
(function () {
  var MAX_SHOWN = 200000; // characters of an input or record shown here; its page has all

  function loadPart(box) {
    var out = box.querySelector("pre");
    box.dataset.state = "loading";
    out.textContent = "loading…";
    fetch(box.dataset.src, { headers: { accept: "application/json" } })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        if (!answer.ok) { throw new Error(answer.body.message || "not found"); }
        var text = JSON.stringify(answer.body.value, null, 2);
        if (text.length > MAX_SHOWN) {
          text = text.slice(0, MAX_SHOWN) + "\n… cut at " + MAX_SHOWN.toLocaleString() + " of " +
            text.length.toLocaleString() + " characters (the operation's page has it all)";
        }
        out.textContent = text;
        box.dataset.state = "loaded";
      })
      .catch(function (error) {
        out.textContent = "Could not load it: " + error.message;
        box.classList.add("failed");
        box.dataset.state = "";
      });
  }

  function loadOlder(link) {
    var list = document.querySelector("#conversation ol.chat");
    if (!list || link.dataset.state === "loading") { return; }
    link.dataset.state = "loading";
    link.textContent = "Loading older turns…";
    fetch(link.getAttribute("href"), { headers: { accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        var first = list.firstChild;
        page.querySelectorAll("#conversation ol.chat > li").forEach(function (item) {
          list.insertBefore(document.adoptNode(item), first);
        });
        var next = page.querySelector("#conversation a.load-older");
        if (next) {
          link.setAttribute("href", next.getAttribute("href"));
          link.textContent = "Load older turns";
          link.dataset.state = "";
        } else {
          link.parentNode.removeChild(link);
        }
      })
      .catch(function (error) {
        link.textContent = "Could not load older turns (" + error.message + "); try again";
        link.dataset.state = "";
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("details[data-src]").forEach(function (box) {
      box.addEventListener("toggle", function () {
        if (box.open && !box.dataset.state) { loadPart(box); }
      });
    });
    document.addEventListener("click", function (event) {
      var link = event.target instanceof Element ? event.target.closest("a.load-older") : null;
      if (link) {
        event.preventDefault();
        loadOlder(link);
      }
    });
  });
})();
