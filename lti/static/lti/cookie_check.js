// The LTI login's cookie check (PyLTI1p3's "check cookies" pattern, without inline script): if
// this frame may keep a cookie, continue the login here; otherwise offer a new window.
(function () {
  "use strict";
  var form = document.getElementById("lti-continue");
  if (!form) return;
  var secure = window.location.protocol === "https:";
  document.cookie = "lti1p3_test_cookie=1; path=/" + (secure ? "; SameSite=None; Secure" : "");
  if (document.cookie.indexOf("lti1p3_test_cookie") !== -1) {
    document.cookie = "lti1p3_test_cookie=1; path=/; expires=Thu, 01 Jan 1970 00:00:01 GMT" + (secure ? "; SameSite=None; Secure" : "");
    form.submit();
  } else {
    document.getElementById("lti-loading").hidden = true;
    document.getElementById("lti-blocked").hidden = false;
  }
})();
