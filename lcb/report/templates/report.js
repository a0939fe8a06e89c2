
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.dataset.dir !== 'up';
    th.dataset.dir = up ? 'up' : 'down';
    function key(row) {
      var cell = row.cells[th.cellIndex];
      var text = cell ? (cell.dataset.v || cell.textContent) : '';
      var num = parseFloat(text);
      return isNaN(num) ? text : num;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
var filter = document.getElementById('flipfilter');
if (filter) {
  filter.addEventListener('change', function () {
    var want = filter.value, shown = 0;
    document.querySelectorAll('#flips tbody tr').forEach(function (row) {
      var ok = !want || (' ' + row.dataset.changes + ' ').indexOf(' ' + want + ' ') >= 0;
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    document.getElementById('flipcount').textContent = shown + ' shown';
  });
}
