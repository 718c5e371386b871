import unittest

from todo import Task, TodoList


class AcceptSeparateTagsTest(unittest.TestCase):
    def test_new_tasks_start_untagged(self):
        first = Task("a")
        first.tag("urgent")
        second = Task("b")
        self.assertEqual(second.tags, [])
        self.assertEqual(first.tags, ["urgent"])

    def test_list_tags_do_not_leak(self):
        todos = TodoList()
        todos.add("call bank").tag("urgent")
        later = todos.add("water plants")
        self.assertEqual(later.tags, [])
        self.assertEqual([t.title for t in todos.tagged("urgent")], ["call bank"])
