"""Time from clicking Launch to seeing Running on the page, against a running portal.

    make demo                      # in one terminal
    .venv/bin/python -m bench.launch_latency --sessions 5

Drives headless Chromium (Debian's /usr/bin/chromium) as students student001..N: log in, click
Launch on the "small" template, wait until the card shows running (pushed over the websocket),
then stop. Prints each time and the median. With the local driver this includes starting a real
JupyterLab process.
"""

from __future__ import annotations

import argparse
import statistics
import time

from playwright.sync_api import expect, sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--template", default="small")
    parser.add_argument("--password", default="npu-lab-demo")
    parser.add_argument("--screenshot", default="")
    args = parser.parse_args()
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for number in range(1, args.sessions + 1):
            context = browser.new_context()
            page = context.new_page()
            page.goto(args.url + "/accounts/login/")
            page.fill("#id_username", f"student{number:03d}")
            page.fill("#id_password", args.password)
            page.click("button[type=submit]")
            expect(page.locator("body[data-live=yes]")).to_have_count(1, timeout=15_000)
            started = time.perf_counter()
            page.locator("form.js-launch", has_text=args.template).get_by_role("button", name="Launch").click()
            card = page.locator("#sessions article.session").first
            expect(card).to_have_attribute("data-state", "running", timeout=120_000)
            elapsed = time.perf_counter() - started
            times.append(elapsed)
            print(f"student{number:03d}: Launch -> Running in {elapsed:.2f} s", flush=True)
            if args.screenshot and number == 1:
                page.screenshot(path=args.screenshot, full_page=True)
            card.get_by_role("button", name="Stop").click()
            expect(card).to_have_attribute("data-state", "stopped", timeout=60_000)
            context.close()
        browser.close()
    print(
        f"median Launch -> Running: {statistics.median(times):.2f} s over {len(times)} sessions "
        f"(min {min(times):.2f} s, max {max(times):.2f} s)"
    )


if __name__ == "__main__":
    main()
