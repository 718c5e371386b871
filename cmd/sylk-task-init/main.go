// Command sylk-task-init is the first process of a task command's
// namespaces. The worker starts it; it is not run by hand. See
// pkg/taskinit.
package main

import "sylk.dev/sylk/pkg/taskinit"

func main() { taskinit.Main() }
