local k = require "kiln"
os.execute("touch /tmp/kiln-sandbox-escaped")
return k.graph "os_execute" { inputs = { x = { 4 } }, body = function(g, x) return { y = g:relu(x) } end }
