// LTI Dynamic Registration ends with this message to the LMS, which closes the tool's frame or
// window (LTI DR 1.0 §3.6): at once after a registration, on the button after a refusal (so the
// administrator can read why first). No inline script under the CSP.
(function () {
  "use strict";
  function close() {
    var target = window.opener || window.parent;
    if (target && target !== window) target.postMessage({ subject: "org.imsglobal.lti.close" }, "*");
  }
  var button = document.getElementById("lti-registration-close");
  if (button) button.addEventListener("click", close);
  if (document.querySelector("[data-registered]")) close();
})();
