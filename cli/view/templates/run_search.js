(function () {
  var form = document.getElementById("search"), q = document.getElementById("q"), out = document.getElementById("matches");
  function apply() {
    var text = q.value.toLowerCase(), shown = 0, all = document.querySelectorAll("section.turn");
    all.forEach(function (s) { var hit = !text || s.dataset.text.indexOf(text) >= 0; s.classList.toggle("hidden", !hit); if (hit) shown++; });
    out.textContent = text ? shown + " of " + all.length + " turns match" : "";
  }
  form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  q.addEventListener("input", apply);
})();
