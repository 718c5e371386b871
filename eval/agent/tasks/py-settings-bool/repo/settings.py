"""Application settings read from a key = value file."""


class Settings:
    """Settings as strings, with typed getters."""

    def __init__(self, values=None):
        self._values = dict(values or {})

    @classmethod
    def from_file(cls, path):
        values = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
        return cls(values)

    def get(self, key, default=None):
        return self._values.get(key, default)

    def get_int(self, key, default=0):
        if key not in self._values:
            return default
        return int(self._values[key])

    def get_bool(self, key, default=False):
        if key not in self._values:
            return default
        return bool(self._values[key])
