// Shows each server-rendered UTC <time datetime=...> in the browser's local time zone as
// "YYYY-MM-DD HH:MM:SS"; the UTC text moves to the title. Only textContent is written.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var zone = "local time";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || zone; } catch (e) { /* keep */ }
  function pad(n) { return String(n).padStart(2, "0"); }
  document.querySelectorAll("time[datetime]").forEach(function (element) {
    var d = new Date(element.getAttribute("datetime"));
    if (isNaN(d.getTime())) { return; }
    element.title = element.textContent + " (shown in " + zone + ")";
    element.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
      " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  });
});
