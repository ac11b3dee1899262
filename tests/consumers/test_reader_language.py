"""Which language a websocket reader gets its words in."""

from labs.consumers import reader_language


def test_the_reader_language_comes_from_the_cookie_then_the_browser():
    assert reader_language({"cookies": {"django_language": "zh-hans"}}) == "zh-hans"
    assert reader_language({"headers": [(b"accept-language", b"zh-CN,zh;q=0.9,en;q=0.5")]}) == "zh-hans"
    assert reader_language({"headers": [(b"accept-language", b"fr-FR")]}) == "en"
    assert reader_language({}) == "en"
