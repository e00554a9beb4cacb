// Copy buttons: the command beside each button goes to the clipboard. Where
// the clipboard API is unavailable (a page opened from file:// in some
// browsers), the command is selected for Ctrl-C instead.
document.querySelectorAll("button.copy").forEach(function (button) {
  button.addEventListener("click", function () {
    var text = button.parentElement.querySelector("pre").textContent;
    var done = function () { button.textContent = "copied"; setTimeout(function () { button.textContent = "copy"; }, 1500); };
    var select = function () {
      var range = document.createRange();
      range.selectNodeContents(button.parentElement.querySelector("pre"));
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      button.textContent = "press Ctrl-C";
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, select);
    } else {
      select();
    }
  });
});
