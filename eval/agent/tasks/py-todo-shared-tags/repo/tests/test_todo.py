import unittest

from todo import Task, TodoList


class TodoTest(unittest.TestCase):
    def test_tag(self):
        t = Task("write report", ["work"])
        t.tag("urgent")
        t.tag("urgent")
        self.assertEqual(t.tags, ["work", "urgent"])

    def test_add_with_tags(self):
        todos = TodoList()
        todos.add("buy milk", ["home"])
        todos.add("fix bug", ["work"])
        self.assertEqual([t.title for t in todos.tagged("work")], ["fix bug"])
