// The language switch in the header submits itself when a language is picked. A static file, not
// an inline handler: the Content-Security-Policy allows no inline script.
document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-submit-on-change]");
  if (select && select.form) {
    select.form.submit();
  }
});
