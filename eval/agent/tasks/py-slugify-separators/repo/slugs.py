"""URL slugs for article titles."""

import re
import unicodedata


def slugify(title, max_length=60):
    """Turn a title into a URL slug.

    The slug holds lower-case ASCII letters and digits, with words
    separated by single hyphens and no hyphen at either end. Accented
    letters lose their accents; other characters separate words.
    """
    text = unicodedata.normalize("NFKD", title)
    text = text.encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]", "-", text)
    return slug[:max_length]
