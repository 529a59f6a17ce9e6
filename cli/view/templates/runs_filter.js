(function () {
  var q = document.getElementById("f-q"), v = document.getElementById("f-verdict"), mo = document.getElementById("f-model");
  function apply() {
    var text = q.value.toLowerCase();
    document.querySelectorAll("#runs tbody tr").forEach(function (row) {
      var show = (!text || row.dataset.task.indexOf(text) >= 0) && (!v.value || row.dataset.verdict === v.value) && (!mo.value || row.dataset.model === mo.value);
      row.classList.toggle("hidden", !show);
    });
  }
  [q, v, mo].forEach(function (el) { el.addEventListener("input", apply); el.addEventListener("change", apply); });
})();
