// serve.js runs dynalite for sqlock's dynamo tests.
//
//   node serve.js PORT PATH PORTFILE
//
// PORT 0 picks a free port; PATH "" keeps the data in memory, otherwise it
// is the LevelDB directory (kept across restarts). Once listening, the port
// is written to PORTFILE (through a rename, so it is never read half
// written).
//
// It differs from dynalite's own cli.js in one thing: dynalite's request
// handler throws from the request's 'error' event, so a client that aborts
// a request before its body has arrived (an SDK call whose context ended)
// crashes the whole server. Exactly that error, on that request, is
// dropped here: the request's socket is destroyed and nothing else changes.
'use strict'
const fs = require('fs')
const path = require('path')
const dynalite = require('dynalite')

const [port, dataPath, portFile] = process.argv.slice(2)
const server = dynalite({ path: dataPath || undefined, createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })

const handlers = server.listeners('request')
server.removeAllListeners('request')
server.on('request', (req, res) => {
  const on = req.on
  req.on = function (event, fn) {
    if (event !== 'error') return on.call(this, event, fn)
    return on.call(this, event, (err) => {
      if (err && (err.code === 'ECONNRESET' || err.code === 'ECONNABORTED' || err.message === 'aborted')) {
        req.socket.destroy()
        return
      }
      fn(err)
    })
  }
  for (const h of handlers) h.call(server, req, res)
})

server.listen(Number(port), '127.0.0.1', () => {
  const tmp = portFile + '.tmp'
  fs.writeFileSync(tmp, String(server.address().port))
  fs.renameSync(tmp, portFile)
})
