// Expand a patch row to its diff (click, Enter or Space); open the row a #patch-... link points at.
(function () {
  "use strict";
  function setOpen(row, open) {
    var diff = document.getElementById(row.getAttribute("aria-controls"));
    if (!diff) { return; }
    diff.hidden = !open;
    row.setAttribute("aria-expanded", open ? "true" : "false");
  }
  function toggle(row) { setOpen(row, row.getAttribute("aria-expanded") !== "true"); }
  var rows = document.querySelectorAll("tr.patch");
  Array.prototype.forEach.call(rows, function (row) {
    row.addEventListener("click", function (event) {
      if (event.target.closest("a")) { return; }
      toggle(row);
    });
    row.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); toggle(row); }
    });
  });
  var all = document.getElementById("expand-all");
  if (all) {
    all.addEventListener("click", function () {
      var open = all.textContent === "expand all";
      Array.prototype.forEach.call(rows, function (row) { setOpen(row, open); });
      all.textContent = open ? "collapse all" : "expand all";
    });
  }
  function openFromHash() {
    var target = window.location.hash && document.getElementById(window.location.hash.slice(1));
    if (target && target.classList.contains("patch")) { setOpen(target, true); }
  }
  window.addEventListener("hashchange", openFromHash);
  openFromHash();
})();
