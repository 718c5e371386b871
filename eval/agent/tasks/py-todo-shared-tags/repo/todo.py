"""A small to-do list."""


class Task:
    def __init__(self, title, tags=[]):
        self.title = title
        self.tags = tags
        self.done = False

    def tag(self, name):
        if name not in self.tags:
            self.tags.append(name)

    def __repr__(self):
        return f"Task({self.title!r}, tags={self.tags!r})"


class TodoList:
    def __init__(self):
        self.tasks = []

    def add(self, title, tags=()):
        task = Task(title, list(tags)) if tags else Task(title)
        self.tasks.append(task)
        return task

    def tagged(self, name):
        return [t for t in self.tasks if name in t.tags]
