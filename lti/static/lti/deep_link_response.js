// Deep Linking: send the signed response back to the LMS at once (no inline script under the CSP).
(function () {
  "use strict";
  var form = document.getElementById("lti-deep-link-response");
  if (form) form.submit();
})();
