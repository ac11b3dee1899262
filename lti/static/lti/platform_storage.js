// Platform storage (IMS "LTI Client Side postMessages"): the login puts the state's secret and the
// nonce into the LMS's frame (lti.put_data) and goes on to the LMS; the launch reads them back
// (lti.get_data) and posts them to the tool. Messages go to, and answers are taken from, the
// LMS's origin only. If the LMS does not answer, the page says so (the login offers a new window).
(function () {
  "use strict";
  var root = document.getElementById("lti-storage");
  if (!root) return;
  var data = root.dataset;
  var TIMEOUT_MS = 10000;
  var pending = {};

  function frame() {
    if (data.target === "_parent") return window.parent;
    try {
      return window.parent.frames[data.target] || null;
    } catch (error) {
      return null;
    }
  }

  function messageId() {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
  }

  window.addEventListener("message", function (event) {
    var answer = event.data;
    if (event.origin !== data.origin || !answer || typeof answer !== "object") return;
    var waiting = pending[answer.message_id];
    if (!waiting || answer.subject !== waiting.subject + ".response") return;
    delete pending[answer.message_id];
    if (answer.error || answer.key !== waiting.key) waiting.reject(new Error("refused"));
    else waiting.resolve(answer);
  });

  function ask(subject, key, value) {
    return new Promise(function (resolve, reject) {
      var target = frame();
      if (!target || target === window) return reject(new Error("no platform frame"));
      var message = { subject: subject, message_id: messageId(), key: key };
      if (value !== undefined) message.value = value;
      pending[message.message_id] = { subject: subject, key: key, resolve: resolve, reject: reject };
      target.postMessage(message, data.origin);
      window.setTimeout(function () {
        if (pending[message.message_id]) {
          delete pending[message.message_id];
          reject(new Error("timeout"));
        }
      }, TIMEOUT_MS);
    });
  }

  function failed() {
    document.getElementById("lti-loading").hidden = true;
    document.getElementById("lti-blocked").hidden = false;
  }

  if (data.ltiStorage === "put") {
    Promise.all([
      ask("lti.put_data", data.stateKey, data.stateValue),
      ask("lti.put_data", data.nonceKey, data.nonceValue),
    ]).then(function () {
      window.location.assign(data.redirect);
    }, failed);
  } else {
    Promise.all([ask("lti.get_data", data.stateKey), ask("lti.get_data", data.nonceKey)]).then(function (answers) {
      root.querySelector('[data-lti-storage-value="state"]').value = String(answers[0].value || "");
      root.querySelector('[data-lti-storage-value="nonce"]').value = String(answers[1].value || "");
      root.submit();
    }, failed);
  }
})();
